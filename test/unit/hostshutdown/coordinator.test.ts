import { describe, expect, it } from 'vitest';
import { StopCoordinator, type GuestOutcome, type StopProgress } from '../../../src/hostshutdown/coordinator.js';
import type { PlannedGroup } from '../../../src/hostshutdown/stop-plan.js';
import type { HostShutdownAction } from '../../../src/machine/spec.js';
import { silentLogger } from '../../../src/logging/logger.js';
import { FakeHypervisor, type GuestBehaviour } from '../../support/fakes/fake-hypervisor.js';
import { FakeClock } from '../../support/fakes/fake-clock.js';

interface GuestSetup {
  name: string;
  action: HostShutdownAction;
  behaviour?: GuestBehaviour;
  saveDelayMs?: number;
}
interface GroupSetup {
  minPriority: number;
  budgetSec: number;
  guests: GuestSetup[];
}

const RETRY_MS = 5000;

function setup(table: GroupSetup[], opts: { parallelism?: number; maxConcurrentSaves?: number; timeoutSec?: number; destroyTimeoutMs?: number } = {}) {
  const clock = new FakeClock();
  const hv = new FakeHypervisor({ clock, shutdownDelayMs: 2000 });
  for (const g of table.flatMap((t) => t.guests)) {
    hv.addDomain(`vmkeeper-${g.name}`, 'running');
    hv.setGuestBehaviour(`vmkeeper-${g.name}`, g.behaviour ?? 'obey');
    if (g.saveDelayMs) hv.setSaveDelay(`vmkeeper-${g.name}`, g.saveDelayMs);
  }
  hv.addDomain('not-ours', 'running');
  const groups: PlannedGroup[] = table.map((t) => ({
    minPriority: t.minPriority,
    budgetSec: t.budgetSec,
    guests: t.guests.map((g) => ({ machine: g.name, domain: `vmkeeper-${g.name}`, action: g.action, priority: t.minPriority })),
  }));
  const t0 = clock.now();
  const log: string[] = [];
  const at = () => clock.now() - t0;
  const outcomes = new Map<string, GuestOutcome>();
  const progress: StopProgress[] = [];
  const abort = new AbortController();
  const c = new StopCoordinator({
    hypervisor: hv, clock, logger: silentLogger,
    retryIntervalMs: RETRY_MS, parallelism: opts.parallelism ?? 8, maxConcurrentSaves: opts.maxConcurrentSaves ?? 1,
    savedStateFile: (m) => `/state/guests/${m}/saved-state`,
    pollIntervalMs: 500, destroyTimeoutMs: opts.destroyTimeoutMs ?? 3000,
    signal: abort.signal,
    listener: {
      groupStarted: (i, deadlineAt) => log.push(`${at()} group ${i + 1} until ${deadlineAt - t0}`),
      shutdownRequested: (g) => log.push(`${at()} requested ${g.machine}`),
      saveFailed: (g, why) => log.push(`${at()} save failed ${g.machine}: ${why}`),
      finished: (g, o) => {
        outcomes.set(g.machine, o);
        log.push(`${at()} ${g.machine} ${o.result}`);
      },
      groupEnded: async (i) => void log.push(`${at()} group ${i + 1} ended`),
      progress: (p) => void progress.push(p),
    },
  });
  const run = () => c.run(groups, t0, t0 + (opts.timeoutSec ?? 120) * 1000);
  return { clock, hv, log, outcomes, progress, abort, run, at };
}

async function runToEnd(clock: FakeClock, p: Promise<unknown>, limitMs = 300_000) {
  let done = false;
  void p.finally(() => (done = true));
  for (let t = 0; !done && t < limitMs; t += 100) await clock.advance(100);
  expect(done).toBe(true);
}

/** The time of the first log line matching re. */
const when = (log: string[], re: RegExp) => Number(log.find((l) => re.test(l))?.split(' ')[0] ?? NaN);

describe('stop coordinator', () => {
  it('runs the groups in order, the next starting as soon as the previous one is all off', async () => {
    const { clock, hv, log, outcomes, run } = setup([
      { minPriority: 500, budgetSec: 20, guests: [{ name: 'a', action: 'shutdown' }, { name: 'b', action: 'shutdown' }] },
      { minPriority: 0, budgetSec: 30, guests: [{ name: 'c', action: 'shutdown' }] },
    ]);
    const p = run();
    await runToEnd(clock, p);
    expect(outcomes.get('a')!.result).toBe('clean');
    expect(outcomes.get('b')!.result).toBe('clean');
    // Group 2 begins once a and b are off (2 s + one poll), not after group 1's 20 s budget.
    const g2 = when(log, /group 2 until/);
    expect(g2).toBeGreaterThanOrEqual(2000);
    expect(g2).toBeLessThan(3000);
    expect(when(log, /requested c/)).toBeGreaterThanOrEqual(g2);
    expect(outcomes.get('c')).toMatchObject({ result: 'clean', detail: 'shut down after 1 ACPI request' });
    expect(log.filter((l) => / group \d ended/.test(l)).map((l) => l.split(' ').slice(1).join(' '))).toEqual(['group 1 ended', 'group 2 ended']);
    expect(hv.calls.some((x) => x.name === 'not-ours')).toBe(false);
  });

  it('shutdown: ACPI resent every retry interval, destroyed at its group budget end, then the next group begins', async () => {
    const { clock, hv, log, outcomes, run } = setup([
      { minPriority: 100, budgetSec: 12, guests: [{ name: 'deaf', action: 'shutdown', behaviour: 'ignore' }] },
      { minPriority: 0, budgetSec: 30, guests: [{ name: 'next', action: 'shutdown' }] },
    ]);
    const p = run();
    await runToEnd(clock, p);
    const deaf = outcomes.get('deaf')!;
    expect(deaf.result).toBe('forced');
    expect(deaf.afterMs).toBeGreaterThanOrEqual(12_000);
    expect(deaf.afterMs).toBeLessThan(12_600);
    expect(deaf.detail).toBe('ignored 3 ACPI requests: destroyed at the budget end');
    expect(hv.shutdownRequests('vmkeeper-deaf')).toBe(3); // at 0, 5 and 10 s
    expect(hv.stateOf('vmkeeper-deaf')).toBe('shutoff');
    expect(when(log, /group 2 until/)).toBeGreaterThanOrEqual(12_000);
    expect(when(log, /group 2 until/)).toBeLessThan(12_600);
  });

  it('force: destroyed at once, never asked', async () => {
    const { clock, hv, outcomes, run } = setup([{ minPriority: 0, budgetSec: 30, guests: [{ name: 'f', action: 'force' }] }]);
    const p = run();
    await runToEnd(clock, p);
    expect(outcomes.get('f')).toMatchObject({ result: 'forced', detail: 'force: destroyed at once' });
    expect(outcomes.get('f')!.afterMs).toBeLessThan(100);
    expect(hv.shutdownRequests('vmkeeper-f')).toBe(0);
  });

  it('save: the guest is saved to its file and stops', async () => {
    const { clock, hv, outcomes, run } = setup([{ minPriority: 0, budgetSec: 30, guests: [{ name: 's', action: 'save', saveDelayMs: 4000 }] }]);
    const p = run();
    await runToEnd(clock, p);
    expect(outcomes.get('s')).toMatchObject({ result: 'saved', detail: 'saved to /state/guests/s/saved-state in 4.0s' });
    expect(hv.savedStates.get('/state/guests/s/saved-state')).toBe('vmkeeper-s');
    expect(hv.stateOf('vmkeeper-s')).toBe('shutoff');
    expect(hv.shutdownRequests('vmkeeper-s')).toBe(0);
  });

  it.each([
    { behaviour: 'obey' as const, result: 'clean', detail: /^save failed \(disk full\); shut down after 1 ACPI request$/ },
    { behaviour: 'ignore' as const, result: 'forced', detail: /^save failed \(disk full\); ignored 2 ACPI requests: destroyed at the budget end$/ },
  ])('a failed save falls back to ACPI shutdown ($behaviour guest: $result)', async ({ behaviour, result, detail }) => {
    const { clock, hv, log, outcomes, run } = setup([{ minPriority: 0, budgetSec: 10, guests: [{ name: 's', action: 'save', behaviour }] }]);
    hv.failNext('saveDomain', new Error('disk full'));
    const p = run();
    await runToEnd(clock, p);
    expect(log.some((l) => /save failed s: disk full/.test(l))).toBe(true);
    expect(when(log, /requested s/)).toBeGreaterThanOrEqual(when(log, /save failed s/));
    expect(outcomes.get('s')!.result).toBe(result);
    expect(outcomes.get('s')!.detail).toMatch(detail);
    expect(hv.savedStates.size).toBe(0);
  });

  it('a save still running at the budget end is destroyed (which aborts it); libvirt was given longer than the budget', async () => {
    const { clock, hv, outcomes, run } = setup([{ minPriority: 0, budgetSec: 10, guests: [{ name: 's', action: 'save', saveDelayMs: 60_000 }] }]);
    const p = run();
    await clock.advance(5000);
    expect(hv.saving('vmkeeper-s')).toBe(true);
    await runToEnd(clock, p);
    expect(outcomes.get('s')).toMatchObject({ result: 'forced', detail: 'the save was still running at the budget end: destroyed' });
    expect(outcomes.get('s')!.afterMs).toBeGreaterThanOrEqual(10_000);
    expect(outcomes.get('s')!.afterMs).toBeLessThan(10_600);
    expect(hv.saving('vmkeeper-s')).toBe(false);
    expect(hv.savedStates.size).toBe(0);
    // The budget left (10 s) + one destroy (3 s) + the margin (5 s): our destroy comes first.
    expect(hv.saveTimeouts).toEqual([18_000]);
  });

  it('saves are bounded (a call slot stays free): the destroys at the budget end still go through', async () => {
    const guests = ['s1', 's2', 's3'].map((name) => ({ name, action: 'save' as const, saveDelayMs: 3000 }));
    const { clock, hv, outcomes, run } = setup([{ minPriority: 0, budgetSec: 8, guests: [...guests, { name: 'deaf', action: 'shutdown', behaviour: 'ignore' }] }], { maxConcurrentSaves: 1 });
    let saving = 0;
    let maxSaving = 0;
    const save = hv.saveDomain.bind(hv);
    hv.saveDomain = async (name: string, file: string, timeoutMs: number) => {
      maxSaving = Math.max(maxSaving, ++saving);
      try {
        await save(name, file, timeoutMs);
      } finally {
        saving--;
      }
    };
    const p = run();
    await runToEnd(clock, p);
    expect(maxSaving).toBe(1);
    expect(outcomes.get('s1')!.result).toBe('saved');
    expect(outcomes.get('s2')!.result).toBe('saved');
    // The third save would have begun at 6 s and runs past the 8 s budget: destroyed.
    expect(outcomes.get('s3')!.result).toBe('forced');
    expect(outcomes.get('deaf')!.result).toBe('forced');
  });

  it('at most parallelism shutdown requests in flight at once', async () => {
    const guests = Array.from({ length: 10 }, (_, i) => ({ name: `g${i}`, action: 'shutdown' as const }));
    const { clock, hv, outcomes, run } = setup([{ minPriority: 0, budgetSec: 60, guests }], { parallelism: 3 });
    let inFlight = 0;
    let maxInFlight = 0;
    const original = hv.shutdownDomain.bind(hv);
    hv.shutdownDomain = async (name: string) => {
      maxInFlight = Math.max(maxInFlight, ++inFlight);
      await clock.sleep(100);
      await original(name);
      inFlight--;
    };
    const p = run();
    await runToEnd(clock, p);
    expect([...outcomes.values()].every((o) => o.result === 'clean')).toBe(true);
    expect(maxInFlight).toBe(3);
  });

  it('cancelled: stops sending, the rest is left running, later groups never begin', async () => {
    const { clock, hv, log, outcomes, abort, run } = setup([
      { minPriority: 100, budgetSec: 30, guests: [{ name: 'deaf', action: 'shutdown', behaviour: 'ignore' }] },
      { minPriority: 0, budgetSec: 30, guests: [{ name: 'later', action: 'force' }] },
    ]);
    const p = run();
    await clock.advance(6000);
    abort.abort();
    await runToEnd(clock, p);
    await clock.advance(60_000);
    expect(outcomes.get('deaf')).toMatchObject({ result: 'left-running', detail: 'the run was cancelled (2 ACPI requests sent)' });
    expect(outcomes.get('later')).toMatchObject({ result: 'left-running', detail: 'the run was cancelled before its group began' });
    expect(hv.shutdownRequests('vmkeeper-deaf')).toBe(2);
    expect(hv.stateOf('vmkeeper-deaf')).toBe('running');
    expect(hv.stateOf('vmkeeper-later')).toBe('running');
    expect(log.some((l) => /group 2 until/.test(l))).toBe(false);
  });

  it('a destroy that never returns is a failed guest after the destroy bound, and the run still ends', async () => {
    const { clock, outcomes, run, at } = setup([{ minPriority: 0, budgetSec: 10, guests: [{ name: 'stuck', action: 'shutdown', behaviour: 'hang' }] }]);
    const p = run();
    await runToEnd(clock, p);
    expect(outcomes.get('stuck')).toMatchObject({ result: 'failed', detail: expect.stringMatching(/^destroy failed: .*timed out after 3000 ms/) });
    expect(at()).toBeLessThan(10_000 + 3000 + 600);
  });

  it('a group never runs past the run bound (the budgets after a slow group shrink)', async () => {
    const { clock, log, outcomes, run } = setup([
      { minPriority: 100, budgetSec: 10, guests: [{ name: 'a', action: 'shutdown', behaviour: 'ignore' }] },
      { minPriority: 0, budgetSec: 10, guests: [{ name: 'b', action: 'shutdown', behaviour: 'ignore' }] },
    ], { timeoutSec: 15 });
    const p = run();
    await runToEnd(clock, p);
    expect(log.find((l) => /group 2 until/.test(l))).toMatch(/until 15000$/);
    expect(outcomes.get('b')!.afterMs).toBeLessThan(15_600);
  });

  it('reports progress per group: guests still running, deadlines, guests finished', async () => {
    const { clock, progress, run } = setup([
      { minPriority: 100, budgetSec: 10, guests: [{ name: 'a', action: 'shutdown' }, { name: 'b', action: 'shutdown', behaviour: 'ignore' }] },
      { minPriority: 0, budgetSec: 10, guests: [{ name: 'c', action: 'force' }] },
    ]);
    const p = run();
    await runToEnd(clock, p);
    expect(progress[0]).toMatchObject({ group: 1, groups: 2, minPriority: 100, guestsInGroup: 2, runningInGroup: 2, finished: 0, total: 3 });
    expect(progress.some((x) => x.group === 1 && x.runningInGroup === 1 && x.finished === 1)).toBe(true);
    expect(progress.at(-1)).toMatchObject({ group: 2, runningInGroup: 0, finished: 3 });
  });
});

describe('stop coordinator waits', () => {
  it('past the budget end, waiting on a slow destroy does not spin: it polls at the poll interval', async () => {
    const { clock, hv, outcomes, progress, run } = setup([{ minPriority: 0, budgetSec: 5, guests: [{ name: 'slow', action: 'shutdown', behaviour: 'ignore' }] }], { destroyTimeoutMs: 30_000 });
    const destroy = hv.destroyDomain.bind(hv);
    hv.destroyDomain = async (name: string) => {
      await clock.sleep(10_000); // a qemu that takes 10 s to die
      await destroy(name);
    };
    const p = run();
    await runToEnd(clock, p);
    expect(outcomes.get('slow')!.result).toBe('forced');
    // About one report per 500 ms poll over 15 s, not one per millisecond.
    expect(progress.length).toBeLessThan(60);
  });
});
