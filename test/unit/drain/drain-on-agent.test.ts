import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { DrainController } from '../../../src/drain/drain-controller.js';
import { DrainStateFile } from '../../../src/drain/drain-state-file.js';
import { silentLogger } from '../../../src/logging/logger.js';
import { domainNameFor } from '../../../src/machine/names.js';
import { Harness, SPEC } from '../../support/agent-harness.js';

// The drain controller on the real agent core (its stop procedure, start gate and reconciler) on
// the fake hypervisor and fake clock: what the parts do together.

let h: Harness | undefined;
let dir: string | undefined;
afterEach(async () => {
  await h?.agent.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
  h = dir = undefined;
});

const spec = (o: object) => JSON.stringify({ ...JSON.parse(SPEC), ...o });

async function setup() {
  h = await new Harness({ behaviour: 'obey', shutdownDelayMs: 2000 }).start();
  dir = await mkdtemp(path.join(tmpdir(), 'vmk-drain-agent-'));
  await h.createRunning('db', spec({ shutdownPriority: 500, startPriority: 1 }));
  await h.createRunning('web', spec({ shutdownPriority: 0, startPriority: 9 }));
  const agent = h.agent;
  const drain = new DrainController({
    file: new DrainStateFile(path.join(dir, 'drain.json')),
    gate: agent.startGate,
    stopProcedure: agent.stopProcedure,
    events: { record: (type, reason, message, actor) => agent.records.event('', type, reason, message, actor), flushed: () => agent.journal.flushed() },
    agent: agent.service,
    clock: h.clock,
    logger: silentLogger,
  });
  return { h, drain, off: () => ['db', 'web'].every((n) => h!.hv.stateOf(domainNameFor(n)) === 'shutoff') };
}

describe('a drain on the agent core', () => {
  it('stops every guest, keeps them off past the restart backoff, and undrain brings them back by startPriority', async () => {
    const { h, drain, off } = await setup();
    await drain.drain();
    await h.advanceUntil(() => drain.state === 'drained', 120_000);
    expect(off()).toBe(true);
    expect(h.service.get('web').spec.power).toBe('on');
    await h.advance(60_000); // a minute of resyncs and restart backoff: nothing starts
    expect(off()).toBe(true);

    const mark = h.service.events().length;
    await drain.undrain();
    await h.advanceUntil(() => ['db', 'web'].every((n) => h.hv.stateOf(domainNameFor(n)) === 'running'), 60_000);
    const started = h.service.events().slice(mark).filter((e) => e.reason === 'Started').map((e) => e.machine);
    expect(started).toEqual(['web', 'db']);
  });

  it('a host shutdown during the drain joins its run: one record, kind drain, every guest off', async () => {
    const { h, drain, off } = await setup();
    h.hv.setGuestBehaviour(domainNameFor('web'), 'ignore'); // still running when the host shutdown begins
    await drain.drain();
    await h.advance(500);
    h.agent.enterShutdown('host-shutdown');
    const hostShutdown = h.agent.stopProcedure.run({ kind: 'host-shutdown' });
    await h.advanceUntil(() => drain.state === 'drained', 300_000);
    const record = await hostShutdown;
    expect(record).toMatchObject({ kind: 'drain', result: 'completed' });
    expect(Object.fromEntries(record.machines.map((m) => [m.machine, m.result]))).toEqual({ db: 'clean', web: 'forced' });
    expect(off()).toBe(true);
    expect(h.agent.shutdownRecords.list()).toHaveLength(1);
  });
});
