import { afterEach, describe, expect, it } from 'vitest';
import { Harness } from '../../support/agent-harness.js';
import type { Config } from '../../../src/config/config.js';
import { AgentError } from '../../../src/machine/errors.js';
import { domainNameFor } from '../../../src/machine/names.js';
import { savedStateFile } from '../../../src/machine/paths.js';

// Restore after boot and after an undrain: the order, the bound, the spacing, the StartGate and
// saved states, on the fake hypervisor, fake disks and fake clock.

const dom = domainNameFor;
const spec = (extra: Record<string, unknown> = {}) => JSON.stringify({ cpus: 1, memoryMiB: 128, disks: [{ name: 'root', sizeGiB: 1 }], ...extra });
const HELD = 'the host is drained for maintenance';
let h: Harness;

afterEach(async () => {
  await h?.agent.stop();
});

interface Guest {
  name: string;
  startPriority?: number;
  power?: 'on' | 'off';
}

const restoreConfig = (parallelism: number, delaySec: number) => (c: Config) => {
  c.machines.resyncIntervalSec = 3600;
  c.restore.parallelism = parallelism;
  c.restore.delaySec = delaySec;
};

/** Creates the machines, then the host goes down (every guest off) while no agent runs. */
async function machinesBeforeBoot(guests: Guest[], config: (c: Config) => void): Promise<void> {
  h = await new Harness({ config }).start();
  for (const g of guests) {
    const extra = { ...(g.startPriority !== undefined && { startPriority: g.startPriority }), power: g.power ?? 'on' };
    await h.service.create(g.name, spec(extra));
  }
  await h.advanceUntil(() => guests.every((g) => h.service.get(g.name).status.state === (g.power === 'off' ? 'stopped' : 'running')), 600_000);
  await h.agent.stop();
  for (const g of guests) if (h.hv.stateOf(dom(g.name)) === 'running') h.hv.setState(dom(g.name), 'shutoff');
}

/** The machine each start or restore call from index `from` on was for, in call order. */
function startOrder(from: number): string[] {
  return h.hv.calls.slice(from).flatMap((c) => {
    if (c.op === 'startDomain') return [c.name!.slice(dom('').length)];
    if (c.op === 'restoreDomain') return [c.name!.split('/').at(-2)!];
    return [];
  });
}

const allRunning = (names: string[]) => () => names.every((n) => h.hv.stateOf(dom(n)) === 'running' && h.service.get(n).status.state === 'running');
/** When the machine's latest start or restore was recorded. */
const startedAt = (name: string) => h.service.events().filter((e) => e.machine === name && (e.reason === 'Started' || e.reason === 'Restored')).at(-1)!.timestamp;

const FIVE: Guest[] = [
  { name: 'web-b', startPriority: 10 },
  { name: 'db', startPriority: 900 },
  { name: 'web-a', startPriority: 10 },
  { name: 'cache', startPriority: 500 },
  { name: 'batch' },
];
const FIVE_IN_ORDER = ['db', 'cache', 'web-a', 'web-b', 'batch'];

describe('restore after boot: order', () => {
  it.each([
    ['one at a time', 1],
    ['three at a time', 3],
    ['more slots than machines', 16],
  ])('%s: highest startPriority first, then by name', async (_n, parallelism) => {
    await machinesBeforeBoot(FIVE, restoreConfig(parallelism, 0));
    const from = h.hv.calls.length;
    await h.restart();
    await h.advanceUntil(allRunning(FIVE.map((g) => g.name)), 10_000);
    expect(startOrder(from)).toEqual(FIVE_IN_ORDER);
    for (const g of FIVE) expect(h.reasons(g.name)).toEqual(['Started']);
  });

  it('libvirt comes up after the agent (resyncs ran while it was away): still in order', async () => {
    await machinesBeforeBoot(FIVE, (c) => {
      restoreConfig(1, 0)(c);
      c.machines.resyncIntervalSec = 5;
    });
    h.hv.setAvailable(false);
    await h.restart();
    await h.advance(12_000); // two resyncs, libvirt away
    const from = h.hv.calls.length;
    h.hv.setAvailable(true);
    await h.advanceUntil(allRunning(FIVE.map((g) => g.name)), 20_000);
    expect(startOrder(from)).toEqual(FIVE_IN_ORDER);
  });

  it('a machine whose power is off stays off; the others start', async () => {
    await machinesBeforeBoot([{ name: 'on-1', startPriority: 1 }, { name: 'off-1', startPriority: 999, power: 'off' }], restoreConfig(4, 0));
    const from = h.hv.calls.length;
    await h.restart();
    await h.advanceUntil(allRunning(['on-1']), 10_000);
    await h.advance(30_000);
    expect(startOrder(from)).toEqual(['on-1']);
    expect(h.hv.stateOf(dom('off-1'))).toBe('shutoff');
    expect(h.service.get('off-1').status.state).toBe('stopped');
  });

  it('an agent restart with every guest still running starts nothing and records nothing', async () => {
    h = await new Harness({ config: restoreConfig(2, 5) }).start();
    for (const name of ['a', 'b', 'c']) await h.createRunning(name);
    const from = h.hv.calls.length;
    await h.restart();
    await h.advance(60_000);
    expect(startOrder(from)).toEqual([]);
    expect(h.reasons()).toEqual([]);
    expect(allRunning(['a', 'b', 'c'])()).toBe(true);
  });
});

describe('restore after boot: parallelism and delay', () => {
  it.each([1, 2, 3])('never more than %i starts in flight', async (parallelism) => {
    const guests = Array.from({ length: 7 }, (_, i) => ({ name: `g${i}`, startPriority: i }));
    await machinesBeforeBoot(guests, restoreConfig(parallelism, 0));
    h.hv.hold('startDomain');
    await h.restart();
    const seen: number[] = [];
    while (!allRunning(guests.map((g) => g.name))()) {
      await h.advance(200);
      seen.push(h.hv.heldCalls('startDomain'));
      h.hv.resume('startDomain'); // the held starts finish together...
      h.hv.hold('startDomain'); // ...and the next ones are caught again
      if (seen.length > 100) throw new Error(`never finished: ${seen.join(',')}`);
    }
    expect(Math.max(...seen)).toBe(parallelism); // the bound is used, and never passed
  });

  it.each([
    [1, 10],
    [3, 10],
    [2, 60],
  ])('parallelism %i, delaySec %i: each start begins delaySec after the one before', async (parallelism, delaySec) => {
    const guests = [{ name: 'p3', startPriority: 3 }, { name: 'p2', startPriority: 2 }, { name: 'p1', startPriority: 1 }, { name: 'p0' }];
    await machinesBeforeBoot(guests, restoreConfig(parallelism, delaySec));
    await h.restart();
    // The last one waits its turn, and says so.
    expect(h.service.get('p0').status).toMatchObject({ state: 'stopped', message: expect.stringMatching(/waiting for its turn to start/) });
    await h.advanceUntil(allRunning(guests.map((g) => g.name)), 10 * delaySec * 1000, delaySec * 10);
    const times = ['p3', 'p2', 'p1', 'p0'].map(startedAt);
    for (let i = 1; i < times.length; i++) {
      expect(times[i] - times[i - 1]).toBeGreaterThanOrEqual(delaySec * 1000);
      expect(times[i] - times[i - 1]).toBeLessThanOrEqual(delaySec * 1000 + 200);
    }
    expect(h.service.get('p0').status.message).toBe('');
  });

  it('after the restore, an ordinary start (a new machine) does not wait for the delay', async () => {
    await machinesBeforeBoot([{ name: 'old-1' }, { name: 'old-2' }], restoreConfig(1, 60));
    await h.restart();
    await h.advanceUntil(allRunning(['old-1', 'old-2']), 200_000);
    const before = h.clock.now();
    await h.service.create('fresh', spec());
    await h.advanceUntil(allRunning(['fresh']), 5000, 10);
    expect(startedAt('fresh') - before).toBeLessThan(1000);
  });
});

describe('a machine changed behind the agent\'s back while it waits its turn', () => {
  it.each([
    ['started by hand: not started twice, shown running', 'started'],
    ['undefined by hand: defined again, then started in its turn', 'undefined'],
  ])('%s', async (_n, change) => {
    await machinesBeforeBoot([{ name: 'first', startPriority: 2 }, { name: 'second', startPriority: 1 }], restoreConfig(1, 20));
    const from = h.hv.calls.length;
    await h.restart();
    await h.advanceUntil(() => h.hv.stateOf(dom('first')) === 'running', 5000);
    if (change === 'started') h.hv.setState(dom('second'), 'running');
    else h.hv.removeDomain(dom('second'));
    await h.advanceUntil(allRunning(['first', 'second']), 60_000);
    await h.advance(30_000);
    const starts = startOrder(from);
    expect(starts).toEqual(change === 'started' ? ['first'] : ['first', 'second']);
    expect(h.hv.calls.slice(from).filter((c) => c.op === 'defineDomain' && c.name === dom('second'))).toHaveLength(change === 'started' ? 0 : 1);
    expect(h.service.get('second').status).toMatchObject({ state: 'running', message: '' });
  });
});

describe('the StartGate', () => {
  it('held: nothing starts (not even a new machine), each shows the reason; released: an ordered, spaced restore', async () => {
    h = await new Harness({ config: restoreConfig(1, 5) }).start();
    const guests = [{ name: 'low', p: 1 }, { name: 'high', p: 700 }, { name: 'mid', p: 300 }];
    for (const g of guests) await h.createRunning(g.name, spec({ startPriority: g.p }));
    await h.advance(2000); // seen running
    const eventsBefore = h.reasons().length;
    h.agent.startGate.hold(HELD);
    for (const g of guests) h.hv.setState(dom(g.name), 'shutoff'); // the drain stopped them
    await h.service.create('new', spec({ startPriority: 1000 }));
    const from = h.hv.calls.length;
    await h.advance(60_000);
    expect(startOrder(from)).toEqual([]);
    for (const name of ['low', 'high', 'mid', 'new']) {
      expect(h.service.get(name).status).toMatchObject({ state: 'stopped', message: `not started: ${HELD}` });
    }
    // Stopped by the drain on purpose: no outside-stop warnings.
    expect(h.reasons().slice(eventsBefore).filter((r) => r !== 'Created')).toEqual([]);
    h.agent.startGate.release();
    await h.advanceUntil(allRunning(['low', 'high', 'mid', 'new']), 60_000, 50);
    expect(startOrder(from)).toEqual(['new', 'high', 'mid', 'low']);
    const times = ['new', 'high', 'mid', 'low'].map(startedAt);
    for (let i = 1; i < times.length; i++) expect(times[i] - times[i - 1]).toBeGreaterThanOrEqual(5000);
    for (const name of ['low', 'high', 'mid', 'new']) expect(h.service.get(name).status.message).toBe('');
  });

  it('released while libvirt is away: the restore is collected once it is back, still in order', async () => {
    h = await new Harness({ config: (c) => {
      restoreConfig(1, 0)(c);
      c.machines.resyncIntervalSec = 5;
    } }).start();
    for (const g of FIVE) await h.createRunning(g.name, spec({ startPriority: g.startPriority ?? 0 }));
    h.agent.startGate.hold(HELD);
    for (const g of FIVE) h.hv.setState(dom(g.name), 'shutoff');
    await h.advance(2000);
    h.hv.setAvailable(false);
    await h.advance(2000);
    h.agent.startGate.release();
    await h.advance(12_000); // resyncs while libvirt is away
    const from = h.hv.calls.length;
    h.hv.setAvailable(true);
    await h.advanceUntil(allRunning(FIVE.map((g) => g.name)), 20_000);
    expect(startOrder(from)).toEqual(FIVE_IN_ORDER);
  });

  it('held while a restore waits: the waiting starts are dropped, the one in flight finishes', async () => {
    await machinesBeforeBoot([{ name: 'first', startPriority: 2 }, { name: 'second', startPriority: 1 }], restoreConfig(1, 30));
    await h.restart();
    await h.advanceUntil(() => h.hv.stateOf(dom('first')) === 'running', 5000);
    h.agent.startGate.hold(HELD);
    await h.advance(120_000);
    expect(h.hv.stateOf(dom('second'))).toBe('shutoff');
    expect(h.service.get('second').status.message).toBe(`not started: ${HELD}`);
    h.agent.startGate.release();
    await h.advanceUntil(allRunning(['first', 'second']), 10_000);
  });
});

/** Saves a running machine's guest as a "save" host shutdown does, with the file on the fake disks. */
async function saveGuest(name: string): Promise<string> {
  const file = savedStateFile(h.config.stateDir, name);
  await h.hv.saveDomain(dom(name), file, 10_000);
  h.disks.putFile(file);
  return file;
}

describe('saved states', () => {
  it('a saved machine is resumed with restoreDomain in its turn, its file deleted, Restored recorded', async () => {
    h = await new Harness({ config: restoreConfig(1, 0) }).start();
    await h.createRunning('saved', spec({ startPriority: 5 }));
    await h.createRunning('plain', spec({ startPriority: 9 }));
    await h.agent.stop();
    const file = await saveGuest('saved');
    h.hv.setState(dom('plain'), 'shutoff');
    const from = h.hv.calls.length;
    await h.restart();
    await h.advanceUntil(allRunning(['saved', 'plain']), 10_000);
    expect(startOrder(from)).toEqual(['plain', 'saved']);
    expect(h.hv.calls.slice(from).filter((c) => c.op === 'startDomain' && c.name === dom('saved'))).toEqual([]);
    expect(h.reasons('saved')).toEqual(['Restored']);
    expect(h.event('saved', 'Restored')!.message).toMatch(/resumed from its saved state/);
    expect(h.disks.created.has(file)).toBe(false);
  });

  it.each([
    ['libvirt refuses the file', 'set aside, then a cold boot', new Error('operation failed: image is not a saved state')],
    ['libvirt is away', 'kept, then restored', new AgentError('HypervisorUnavailable', 'libvirt call domainRestore timed out')],
  ])('a restore that fails (%s): a warning, state error until the retry succeeds; the file is %s', async (_n, outcome, error) => {
    h = await new Harness({ config: restoreConfig(2, 0) }).start();
    await h.createRunning('vm');
    await h.agent.stop();
    const file = await saveGuest('vm');
    h.hv.failNext('restoreDomain', error);
    await h.restart();
    await h.advanceUntil(() => h.service.get('vm').status.state === 'error', 5000, 10);
    const refused = outcome.startsWith('set aside');
    const warning = h.event('vm', refused ? 'RestoreFailed' : 'ReconcileFailed')!;
    expect(warning.type).toBe('warning');
    expect(h.service.get('vm').status.message).toContain(error.message);
    if (refused) {
      expect(h.service.get('vm').status.message).toMatch(/kept as .*saved-state\.failed and the retry boots the guest afresh/);
      expect(h.disks.created.has(file)).toBe(false);
      expect(h.disks.created.has(`${file}.failed`)).toBe(true);
    } else {
      expect(h.disks.created.has(file)).toBe(true);
    }
    const failedAt = h.clock.now();
    await h.advanceUntil(allRunning(['vm']), 10_000, 50);
    expect(h.clock.now() - failedAt).toBeGreaterThanOrEqual(900); // the backoff's first step is 1 s
    expect(h.service.get('vm').status.message).toBe('');
    expect(h.reasons('vm').at(-1)).toBe(refused ? 'Started' : 'Restored');
    expect(h.reasons('vm').filter((r) => r === 'RestoreFailed')).toHaveLength(refused ? 1 : 0);
    expect(h.disks.created.has(file)).toBe(false);
    if (refused) expect(h.disks.created.has(`${file}.failed`)).toBe(true); // kept for the operator
  });

  it('a domain running while its saved state is still there: the file is stale, deleted, SavedStateDiscarded', async () => {
    h = await new Harness({ config: restoreConfig(2, 0) }).start();
    await h.createRunning('vm');
    await h.agent.stop();
    const file = await saveGuest('vm');
    h.hv.setState(dom('vm'), 'running'); // virsh start, while the agent was down
    const from = h.hv.calls.length;
    await h.restart();
    await h.advanceUntil(() => h.event('vm', 'SavedStateDiscarded') !== undefined, 5000);
    expect(h.event('vm', 'SavedStateDiscarded')!.type).toBe('warning');
    expect(h.disks.created.has(file)).toBe(false);
    expect(startOrder(from)).toEqual([]);
    // Stopped later, it boots afresh: no restore of the old memory.
    h.hv.setState(dom('vm'), 'shutoff');
    await h.advanceUntil(allRunning(['vm']), 10_000);
    expect(h.hv.calls.some((c) => c.op === 'restoreDomain')).toBe(false);
  });

  it('while starts are held (a drain may be writing it), a saved state next to a running domain is left alone', async () => {
    h = await new Harness({ config: restoreConfig(2, 0) }).start();
    h.agent.startGate.hold(HELD);
    await h.service.create('vm', spec());
    await h.advance(2000);
    h.hv.setState(dom('vm'), 'running'); // mid-save, the guest still runs
    h.disks.putFile(savedStateFile(h.config.stateDir, 'vm'));
    await h.advance(5000);
    expect(h.disks.created.has(savedStateFile(h.config.stateDir, 'vm'))).toBe(true);
    expect(h.reasons('vm')).not.toContain('SavedStateDiscarded');
  });
});

describe('a start that keeps failing', () => {
  it('shows state error with the reason until it succeeds, then Started and an empty message', async () => {
    await machinesBeforeBoot([{ name: 'flaky' }], restoreConfig(2, 0));
    for (let i = 0; i < 3; i++) h.hv.failNext('startDomain', new Error('internal error: qemu unexpectedly closed the monitor'));
    await h.restart();
    const states: string[] = [];
    await h.advanceUntil(() => {
      const s = h.service.get('flaky').status;
      states.push(`${s.state}:${s.message}`);
      return s.state === 'running';
    }, 60_000, 100);
    const failing = states.filter((s) => s.startsWith('error:'));
    expect(failing.length).toBeGreaterThan(0);
    expect(failing.every((s) => s.includes('qemu unexpectedly closed the monitor'))).toBe(true);
    // From the first failure to the success it says error: never "waiting" in between.
    const firstError = states.findIndex((s) => s.startsWith('error:'));
    expect(states.slice(firstError, -1).every((s) => s.startsWith('error:'))).toBe(true);
    expect(h.reasons('flaky').filter((r) => r === 'ReconcileFailed')).toHaveLength(1);
    expect(h.reasons('flaky').at(-1)).toBe('Started');
    expect(h.service.get('flaky').status.message).toBe('');
  });
});
