import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { PolicyStopProcedure, type StopRunProgress } from '../../../src/hostshutdown/policy-stop-procedure.js';
import { ShutdownRecords } from '../../../src/hostshutdown/shutdown-records.js';
import type { ShutdownRecord, StopKind } from '../../../src/hostshutdown/stop-procedure.js';
import { silentLogger } from '../../../src/logging/logger.js';
import { domainNameFor } from '../../../src/machine/names.js';
import { Harness } from '../../support/agent-harness.js';

let h: Harness;
let dir: string | undefined;
afterEach(async () => {
  await h?.agent.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
  dir = undefined;
});

const spec = (lifecycle: object) => JSON.stringify({ cpus: 1, memoryMiB: 128, disks: [{ name: 'root', sizeGiB: 1 }], ...lifecycle });

/** Three groups, one guest per action: top (save, 900), mid (shutdown but ignores ACPI, 100), low (force, 0). */
async function setup() {
  h = await new Harness({
    config: (c) => {
      c.hostShutdown = { ...c.hostShutdown, timeoutSec: 60, parallelism: 4, groups: [{ minPriority: 0, budgetSec: 10 }, { minPriority: 100, budgetSec: 20 }, { minPriority: 500, budgetSec: 20 }] };
      c.machines.shutdownRetryIntervalSec = 5;
      c.libvirt.callTimeoutSec = 3;
    },
  }).start();
  await h.createRunning('top', spec({ hostShutdownAction: 'save', shutdownPriority: 900 }));
  await h.createRunning('mid', spec({ shutdownPriority: 100 }));
  await h.createRunning('low', spec({ hostShutdownAction: 'force' }));
  h.hv.setGuestBehaviour(domainNameFor('mid'), 'ignore');
  dir = await mkdtemp(path.join(tmpdir(), 'vmk-stop-'));
  const records = new ShutdownRecords({ dir, logger: silentLogger });
  await records.load();
  const written: ShutdownRecord[] = [];
  const save = records.save.bind(records);
  records.save = (r) => (written.push(structuredClone(r)), save(r));
  const progress: StopRunProgress[] = [];
  const c = h.config;
  const procedure = new PolicyStopProcedure({
    hypervisor: h.hv, clock: h.clock, logger: silentLogger, machines: h.agent.records, records, stateDir: '/state',
    settings: () => ({ ...c.hostShutdown, retryIntervalMs: 5000 }),
    maxConcurrentSaves: 1, destroyTimeoutMs: 3000,
  });
  const started: ShutdownRecord[] = [];
  const ended: ShutdownRecord[] = [];
  procedure.events.on('progress', (p) => void progress.push(p));
  procedure.events.on('started', (r) => void started.push(r));
  procedure.events.on('ended', (r) => void ended.push(r));
  // As the handler does: the reconciler stops, so guests that go off stay off.
  h.agent.enterShutdown('host-shutdown');
  const eventsFrom = h.service.events().length;
  const events = () => h.service.events().slice(eventsFrom).map((e) => `${e.machine || '(host)'} ${e.reason}`);
  return { procedure, records, written, progress, events, started, ended };
}

async function finish<T>(p: Promise<T>): Promise<T> {
  let done = false;
  void p.finally(() => (done = true));
  await h.advanceUntil(() => done, 200_000);
  return p;
}

describe('policy stop procedure', () => {
  it('host shutdown: groups in priority order, one guest per action, events in order, the record on disk', async () => {
    const { procedure, written, events } = await setup();
    const r = await finish(procedure.run({ kind: 'host-shutdown' }));
    expect(r).toMatchObject({ kind: 'host-shutdown', result: 'completed', boundSec: 60 });
    expect(r.groups.map((g) => [g.minPriority, g.budgetSec])).toEqual([[500, 20], [100, 20], [0, 10]]);
    expect(r.groups.every((g, i) => g.startedAt > 0 && g.finishedAt >= g.startedAt && (i === 0 || g.startedAt >= r.groups[i - 1]!.finishedAt))).toBe(true);
    expect(r.machines.map((m) => [m.machine, m.action, m.priority, m.group, m.result])).toEqual([
      ['top', 'save', 900, 0, 'saved'],
      ['mid', 'shutdown', 100, 1, 'forced'],
      ['low', 'force', 0, 2, 'forced'],
    ]);
    const mid = r.machines[1]!;
    expect(mid.detail).toBe('ignored 4 ACPI requests: destroyed at the budget end');
    expect(mid.afterMs).toBeGreaterThanOrEqual(20_000);
    expect(r.machines[0]!.detail).toBe('saved to /state/guests/top/saved-state in 0.0s');
    expect(h.hv.savedStates.get('/state/guests/top/saved-state')).toBe(domainNameFor('top'));
    expect(events()).toEqual([
      '(host) HostShutdownStarted',
      'top Saved',
      'mid ShutdownRequested',
      'mid ForceStopped',
      'low ForceStopped',
      '(host) HostShutdownCompleted',
    ]);
    // Persisted at the start, at each group end, and at the end.
    expect(written.map((w) => `${w.result} ${w.machines.map((m) => m.result).join(',')}`)).toEqual([
      'in-progress pending,pending,pending',
      'in-progress saved,pending,pending',
      'in-progress saved,forced,pending',
      'in-progress saved,forced,forced',
      'completed saved,forced,forced',
    ]);
    const files = await readdir(dir!);
    expect(files).toEqual([`${r.id}.json`]);
    expect(JSON.parse(await readFile(path.join(dir!, files[0]!), 'utf8'))).toEqual(r);
    expect(h.service.get('top').spec.power).toBe('on'); // no record changed
  });

  it.each([
    { kind: 'service-stop' as StopKind, host: true },
    { kind: 'drain' as StopKind, host: false },
  ])('$kind: host-level events only for host shutdown and service stop; per-machine events always', async ({ kind, host }) => {
    const { procedure, events } = await setup();
    const r = await finish(procedure.run({ kind }));
    expect(r.kind).toBe(kind);
    expect(events().filter((e) => e.startsWith('(host)'))).toEqual(host ? ['(host) HostShutdownStarted', '(host) HostShutdownCompleted'] : []);
    expect(events().filter((e) => !e.startsWith('(host)'))).toEqual(['top Saved', 'mid ShutdownRequested', 'mid ForceStopped', 'low ForceStopped']);
  });

  it('cancelled: the rest is left running and the record says cancelled', async () => {
    const { procedure, records, progress } = await setup();
    const abort = new AbortController();
    const run = procedure.run({ kind: 'drain', signal: abort.signal });
    // The record is on disk (real files) before the first group begins: wait for top's save.
    await h.advanceUntil(() => progress.some((p) => p.finished === 1));
    await h.advance(3000);
    abort.abort();
    const r = await finish(run);
    expect(r.result).toBe('cancelled');
    expect(r.machines.map((m) => m.result)).toEqual(['saved', 'left-running', 'left-running']);
    expect(records.get(r.id)!.result).toBe('cancelled');
    expect(h.hv.stateOf(domainNameFor('low'))).toBe('running');
  });

  it('a marked domain without a record goes down the default way, named by its domain', async () => {
    const { procedure } = await setup();
    h.hv.addDomain('vmkeeper-orphan', 'running');
    const r = await finish(procedure.run({ kind: 'host-shutdown' }));
    expect(r.machines.find((m) => m.domain === 'vmkeeper-orphan')).toMatchObject({ machine: 'vmkeeper-orphan', action: 'shutdown', priority: 0, group: 2, result: 'clean' });
  });

  it('one run at a time: a second call gets the same run', async () => {
    const { procedure } = await setup();
    const a = procedure.run({ kind: 'host-shutdown' });
    const b = procedure.run({ kind: 'service-stop' });
    expect(b).toBe(a);
    await finish(a);
  });

  it('a run asked for while a cancelled one winds down is a new run, after it', async () => {
    const { procedure, records, progress } = await setup();
    const abort = new AbortController();
    const first = procedure.run({ kind: 'host-shutdown', signal: abort.signal });
    await h.advanceUntil(() => progress.some((p) => p.finished === 1));
    abort.abort();
    const second = procedure.run({ kind: 'host-shutdown' });
    expect(second).not.toBe(first);
    const [a, b] = await finish(Promise.all([first, second]));
    expect(a.result).toBe('cancelled');
    expect(b.result).toBe('completed');
    expect(b.startedAt).toBeGreaterThanOrEqual(a.finishedAt);
    expect(records.list().map((r) => r.result)).toEqual(['cancelled', 'completed']);
    expect(b.machines.map((m) => m.machine)).toEqual(['mid', 'low']); // top was saved by the first run
  });

  it('announces start, progress (with its kind) and end', async () => {
    const { procedure, progress, started, ended } = await setup();
    const r = await finish(procedure.run({ kind: 'host-shutdown' }));
    expect(started.map((x) => [x.id, x.result])).toEqual([[r.id, 'in-progress']]);
    expect(ended).toEqual([r]);
    expect(progress[0]).toMatchObject({ kind: 'host-shutdown', group: 1, groups: 3, minPriority: 500 });
    expect(progress.at(-1)).toMatchObject({ group: 3, finished: 3, total: 3 });
  });
});
