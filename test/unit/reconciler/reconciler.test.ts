import { afterEach, describe, expect, it } from 'vitest';
import { Harness } from '../../support/agent-harness.js';
import type { Config } from '../../../src/config/config.js';
import type { DomainDescription } from '../../../src/hypervisor/port.js';
import { domainNameFor } from '../../../src/machine/names.js';

const dom = domainNameFor;
const spec = (extra: Record<string, unknown> = {}) => JSON.stringify({ cpus: 1, memoryMiB: 128, disks: [{ name: 'root', sizeGiB: 1 }], ...extra });
let h: Harness;
// The periodic resync is the one safety net that may run passes on a settled machine: put it out
// of the way so every pass a test counts was caused by something.
const quietResync = (c: Config) => (c.machines.resyncIntervalSec = 3600);

afterEach(async () => {
  await h?.agent.stop();
});

/** Passes the reconciler runs while fake time moves on by ms, once the observer has seen the last change. */
async function passesDuring(ms: number): Promise<number> {
  await h.advance(2 * h.config.machines.pollIntervalMs);
  const before = h.agent.reconciler.stats.passes;
  await h.advance(ms);
  return h.agent.reconciler.stats.passes - before;
}

describe('reconciler: a pass that changes nothing schedules no other pass', () => {
  it('a settled running machine and a settled stopped one get 0 passes over 10 s', async () => {
    h = await new Harness({ config: quietResync }).start();
    await h.createRunning('up');
    await h.service.create('down', spec({ power: 'off' }));
    await h.advanceUntil(() => h.service.get('down').status.state === 'stopped');
    expect(await passesDuring(10_000)).toBe(0);
  });

  it('the wedge: a domain started by hand while its power is off is handed to the sweeper once, then 0 passes', async () => {
    h = await new Harness({ behaviour: 'ignore', config: quietResync }).start();
    await h.service.create('off-1', spec({ power: 'off', gracePeriodSec: 30 }));
    await h.advanceUntil(() => h.service.get('off-1').status.state === 'stopped');
    h.hv.setState(dom('off-1'), 'running'); // virsh start
    const startedAt = h.clock.now();
    await h.advanceUntil(() => h.reasons('off-1').includes('ShutdownRequested'), 5000);
    const warned = h.event('off-1', 'StartedOutsideAgent')!;
    expect(warned.type).toBe('warning');
    expect(warned.message).toMatch(/started outside the agent while its power is off; shutting it down gracefully/);
    const status = h.service.get('off-1').status;
    expect(status.gracePeriodSec).toBe(30);
    expect(status.forceStopAt - startedAt).toBeGreaterThanOrEqual(30_000);
    expect(status.forceStopAt - startedAt).toBeLessThanOrEqual(31_100); // one poll late at most
    // While the sweeper owns it (the guest ignores the button), the reconciler stays quiet.
    expect(await passesDuring(10_000)).toBe(0);
    await h.advanceUntil(() => h.service.get('off-1').status.state === 'stopped', 30_000);
    expect(h.reasons('off-1')).toContain('ForceStopped');
    expect(h.hv.stateOf(dom('off-1'))).toBe('shutoff');
    expect(h.reasons('off-1').filter((r) => r === 'StartedOutsideAgent')).toHaveLength(1);
    expect(await passesDuring(10_000)).toBe(0);
  });
});

/** The reasons of a machine's events from index `from` on. */
const reasonsSince = (machine: string, from: number) => h.reasons(machine).slice(from);
const starts = (name: string) => h.hv.calls.filter((c) => c.op === 'startDomain' && c.name === dom(name)).length;

/** Destroys the domain behind the agent's back and waits for the agent to start it again; returns the delay. */
async function destroyAndTimeRestart(name: string, stepMs = 50): Promise<number> {
  const before = starts(name);
  h.hv.setState(dom(name), 'shutoff');
  const stoppedAt = h.clock.now();
  await h.advanceUntil(() => starts(name) > before && h.hv.stateOf(dom(name)) === 'running', 20 * 60_000, stepMs);
  return h.clock.now() - stoppedAt;
}

describe('reconciler: power on but the domain stopped outside the agent', () => {
  it('restarts it with an event, and a backoff of 1 s, 2 s, 4 s while it keeps stopping', async () => {
    h = await new Harness({ config: quietResync }).start();
    await h.createRunning('crashy');
    await h.advance(2000); // seen running by a pass
    const delays: number[] = [];
    for (let i = 0; i < 3; i++) {
      delays.push(await destroyAndTimeRestart('crashy'));
      await h.advance(1500); // seen running again
    }
    // Each delay is the backoff plus at most one 1 s poll to notice the stop (and 50 ms steps).
    expect(delays[0]).toBeGreaterThanOrEqual(1000);
    expect(delays[0]).toBeLessThanOrEqual(2100);
    expect(delays[1]).toBeGreaterThanOrEqual(2000);
    expect(delays[1]).toBeLessThanOrEqual(3100);
    expect(delays[2]).toBeGreaterThanOrEqual(4000);
    expect(delays[2]).toBeLessThanOrEqual(5100);
    const warnings = h.service.events().filter((e) => e.machine === 'crashy' && e.reason === 'StoppedOutsideAgent');
    expect(warnings.map((e) => e.message)).toEqual([
      expect.stringMatching(/stopped outside the agent.*restarting in 1s/),
      expect.stringMatching(/restarting in 2s/),
      expect.stringMatching(/restarting in 4s/),
    ]);
    expect(warnings.every((e) => e.type === 'warning')).toBe(true);
    expect(h.service.get('crashy').status.state).toBe('running');
  });

  it('the backoff is capped at 5 min and starts again from 1 s after 10 min up', async () => {
    h = await new Harness({ config: quietResync }).start();
    await h.createRunning('flap');
    await h.advance(2000);
    let last = 0;
    for (let i = 0; i < 10; i++) {
      last = await destroyAndTimeRestart('flap', 500);
      await h.advance(1500);
    }
    expect(last).toBeGreaterThanOrEqual(300_000);
    expect(last).toBeLessThanOrEqual(301_600); // 2^9 s would be 512 s
    await h.advance(10 * 60_000, 1000);
    const afterStable = await destroyAndTimeRestart('flap');
    expect(afterStable).toBeLessThanOrEqual(2100);
  });

  it('a guest that dies again before the next poll after its restart is still noticed', async () => {
    h = await new Harness({ config: quietResync }).start();
    await h.createRunning('early');
    await h.advance(2000);
    await destroyAndTimeRestart('early');
    const second = await destroyAndTimeRestart('early'); // no poll saw it running in between
    expect(second).toBeGreaterThanOrEqual(2000);
    expect(second).toBeLessThanOrEqual(3100);
  });

  it('a resync or a snapshot does not cut the restart delay short', async () => {
    h = await new Harness({ config: quietResync }).start();
    await h.createRunning('patient');
    await h.advance(2000);
    for (let i = 0; i < 3; i++) {
      await destroyAndTimeRestart('patient');
      await h.advance(1500);
    }
    h.hv.setState(dom('patient'), 'shutoff'); // the 4th stop: restart in 8 s
    await h.advanceUntil(() => h.reasons('patient').filter((r) => r === 'StoppedOutsideAgent').length === 4, 5000, 50);
    const noticedAt = h.clock.now();
    const before = starts('patient');
    await h.agent.reconciler.resyncAll();
    await h.agent.observer.pollNow();
    await h.agent.reconciler.kick('patient');
    await h.advance(7000);
    expect(starts('patient')).toBe(before);
    await h.advanceUntil(() => starts('patient') > before, 5000, 50);
    expect(h.clock.now() - noticedAt).toBeGreaterThanOrEqual(8000);
  });

  it('restartPolicy never: the stop becomes the desired power, one record update, and it stays off', async () => {
    h = await new Harness({ config: quietResync }).start();
    await h.createRunning('once', spec({ restartPolicy: 'never' }));
    await h.advance(2000);
    const versionBefore = h.service.get('once').resourceVersion;
    h.hv.setState(dom('once'), 'shutoff'); // the guest powered itself off
    await h.advanceUntil(() => h.service.get('once').spec.power === 'off', 5000);
    expect(h.service.get('once').resourceVersion).toBe(versionBefore + 1);
    expect(h.service.get('once').status).toMatchObject({ state: 'stopped', forceStopAt: 0 });
    expect(h.event('once', 'StoppedOutsideAgent')!.message).toMatch(/stays off/);
    const before = starts('once');
    await h.advance(60_000);
    expect(starts('once')).toBe(before);
    expect(h.hv.stateOf(dom('once'))).toBe('shutoff');
  });

  it('on the first pass after an agent start a stopped domain with power on is simply started', async () => {
    h = await new Harness({ config: quietResync }).start();
    await h.createRunning('boot');
    await h.agent.stop();
    h.hv.setState(dom('boot'), 'shutoff'); // stopped while no agent ran
    await h.restart(); // a new process: a new event log
    await h.advanceUntil(() => h.hv.stateOf(dom('boot')) === 'running');
    expect(h.reasons('boot')).toEqual(['Started']);
  });

  it('guests stopped by a host shutdown that is called off are not counted as outside stops', async () => {
    h = await new Harness({ config: quietResync }).start();
    await h.createRunning('guest');
    await h.advance(2000);
    const from = h.reasons('guest').length;
    h.agent.enterShutdown('host-shutdown');
    h.hv.setState(dom('guest'), 'shutoff'); // the host-shutdown coordinator stopped it
    await h.advance(2000);
    h.agent.leaveShutdown();
    await h.advanceUntil(() => h.hv.stateOf(dom('guest')) === 'running', 5000);
    expect(reasonsSince('guest', from)).toEqual(['Started']);
  });
});

const callsOn = (name: string) => h.hv.calls.filter((c) => c.name === dom(name)).map((c) => c.op);

describe('reconciler: a domain undefined by hand', () => {
  it('is confirmed with domainState, defined again from the record with a DomainUndefined warning, and started', async () => {
    h = await new Harness({ config: quietResync }).start();
    await h.createRunning('lost');
    await h.advance(2000); // the observer has seen it
    const uuid = h.service.get('lost').uuid;
    h.hv.setState(dom('lost'), 'shutoff');
    h.hv.removeDomain(dom('lost')); // virsh destroy + virsh undefine
    const callsBefore = h.hv.calls.length;
    await h.advanceUntil(() => h.hv.stateOf(dom('lost')) === 'running', 10_000);
    const ops = h.hv.calls.slice(callsBefore).filter((c) => c.name === dom('lost')).map((c) => c.op);
    expect(ops.indexOf('domainState')).toBeGreaterThanOrEqual(0);
    expect(ops.indexOf('domainState')).toBeLessThan(ops.indexOf('defineDomain'));
    expect(h.hv.uuidOf(dom('lost'))).toBe(uuid);
    const warned = h.event('lost', 'DomainUndefined')!;
    expect(warned.type).toBe('warning');
    expect(warned.message).toMatch(/undefined outside the agent/);
    expect(h.service.get('lost').status.state).toBe('running');
  });

  it('a powered-off machine gets its definition back (at the next full listing) and stays off', async () => {
    // An undefine of a shut-off domain leaves the active set alone: the resync's full listing sees it.
    h = await new Harness({ config: (c) => (c.machines.resyncIntervalSec = 30) }).start();
    await h.service.create('cold', spec({ power: 'off' }));
    await h.advanceUntil(() => h.service.get('cold').status.state === 'stopped');
    await h.advance(2000);
    h.hv.removeDomain(dom('cold'));
    await h.advanceUntil(() => h.hv.stateOf(dom('cold')) === 'shutoff', 35_000);
    expect(h.reasons('cold')).toContain('DomainUndefined');
    expect(starts('cold')).toBe(0);
  });
});

describe('reconciler: a domain with our name but not our mark', () => {
  const FOREIGN_UUID = '11111111-2222-3333-4444-555555555555';
  const forbidden = ['startDomain', 'shutdownDomain', 'destroyDomain', 'defineDomain', 'undefineDomain'] as const;

  /** A marked description as the agent defines it, taken from a machine of its own. */
  async function ourDescriptionFor(name: string): Promise<DomainDescription> {
    await h.createRunning('donor');
    return { ...h.hv.descriptionOf(dom('donor'))!, domainName: dom(name), machineName: name };
  }

  async function expectLeftAlone(name: string, state: 'running' | 'shutoff', callsBefore: number): Promise<void> {
    await h.advanceUntil(() => h.service.get(name).status.state === 'error', 10_000);
    await h.advance(30_000);
    const ops = h.hv.calls.slice(callsBefore).filter((c) => c.name === dom(name)).map((c) => c.op);
    for (const op of forbidden) expect(ops).not.toContain(op);
    expect(ops.filter((op) => op === 'domainIdentity')).toHaveLength(1); // read once, cached
    expect(h.hv.stateOf(dom(name))).toBe(state);
    expect(h.hv.uuidOf(dom(name))).toBe(FOREIGN_UUID);
    expect(h.service.get(name).status.message).toMatch(/the agent leaves it alone/);
    const warnings = h.service.events().filter((e) => e.machine === name && e.reason === 'ForeignDomain');
    expect(warnings).toHaveLength(1);
    expect(warnings[0].type).toBe('warning');
    expect(h.reasons(name)).not.toContain('StartedOutsideAgent');
  }

  it.each([
    ['no mark, stopped, power on', 'on', 'shutoff', false],
    ['no mark, running, power off', 'off', 'running', false],
    ['our mark but another UUID, stopped, power on', 'on', 'shutoff', true],
    ['our mark but another UUID, running, power off', 'off', 'running', true],
  ] as const)('defined before the machine (%s): never started, stopped, redefined or undefined; ForeignDomain', async (_n, power, state, marked) => {
    h = await new Harness({ config: quietResync }).start();
    const description = marked ? await ourDescriptionFor('twin') : undefined;
    h.hv.addDomain(dom('twin'), state, FOREIGN_UUID, description);
    const callsBefore = h.hv.calls.length;
    await h.service.create('twin', spec({ power }));
    await expectLeftAlone('twin', state, callsBefore);
  });

  it('replaced while the agent was down: the new process checks before acting and leaves it alone', async () => {
    h = await new Harness({ config: quietResync }).start();
    await h.createRunning('twin');
    await h.agent.stop();
    h.hv.setState(dom('twin'), 'shutoff');
    h.hv.removeDomain(dom('twin'));
    h.hv.addDomain(dom('twin'), 'shutoff', FOREIGN_UUID);
    const callsBefore = h.hv.calls.length;
    await h.restart();
    await expectLeftAlone('twin', 'shutoff', callsBefore);
  });

  it('ownership is read once per domain per process and read again after the domain vanished', async () => {
    h = await new Harness({ config: quietResync }).start();
    await h.createRunning('owned');
    await h.advance(2000);
    for (let i = 0; i < 3; i++) await destroyAndTimeRestart('owned');
    expect(callsOn('owned').filter((op) => op === 'domainIdentity')).toHaveLength(0); // defined by this process: known
    await h.restart();
    await h.advance(2000);
    for (let i = 0; i < 2; i++) await destroyAndTimeRestart('owned');
    expect(callsOn('owned').filter((op) => op === 'domainIdentity')).toHaveLength(1);
    expect(await h.agent.ownership.isOurs(dom('owned'), h.service.get('owned'))).toBe(true);
  });
});

describe('reconciler: orphans', () => {
  it('reportedOrphans only grows: a name orphaned a second time is reported again', async () => {
    h = await new Harness({ config: quietResync }).start();
    await h.createRunning('donor');
    const marked = { ...h.hv.descriptionOf(dom('donor'))!, machineName: 'ghost' };
    const orphanEvents = () => h.service.events().filter((e) => e.reason === 'OrphanDomain' && e.message.includes('vmkeeper-ghost'));
    h.hv.addDomain(dom('ghost'), 'running', undefined, marked);
    await h.advanceUntil(() => orphanEvents().length === 1, 5000);
    await h.advance(5000);
    expect(orphanEvents()).toHaveLength(1); // once per appearance, not once per poll
    h.hv.setState(dom('ghost'), 'shutoff');
    h.hv.removeDomain(dom('ghost'));
    await h.advance(2000);
    h.hv.addDomain(dom('ghost'), 'running', undefined, marked);
    await h.advanceUntil(() => orphanEvents().length === 2, 5000);
    expect(orphanEvents()[1].type).toBe('warning');
  });

  it('a domain with the prefix but without our mark is not reported', async () => {
    h = await new Harness({ config: quietResync }).start();
    h.hv.addDomain(dom('hand-made'), 'running');
    await h.advance(5000);
    expect(h.reasons()).not.toContain('OrphanDomain');
  });
});

describe('reconciler: the review defects', () => {
  it('a due force stop never waits behind the reconciler queue (kick takes its slot, then the machine lock)', async () => {
    h = await new Harness({ behaviour: 'ignore', config: quietResync }).start();
    await h.createRunning('victim', spec({ gracePeriodSec: 5 }));
    h.hv.hold('defineDomain'); // every reconcile slot ends up stuck in a slow define
    for (let i = 0; i < 8; i++) await h.service.create(`busy-${i}`, spec());
    await h.settle();
    expect(h.hv.heldCalls('defineDomain')).toBe(8);
    await h.service.setPower('victim', 'off'); // kicks the reconciler (queued for a slot) and the sweeper
    const deadline = h.service.get('victim').status.forceStopAt;
    await h.advanceUntil(() => h.event('victim', 'ForceStopped') !== undefined, 10_000, 10);
    expect(h.event('victim', 'ForceStopped')!.timestamp - deadline).toBeLessThan(100);
    expect(h.reasons('victim')).toContain('ShutdownRequested');
    h.hv.resume('defineDomain');
    await h.advanceUntil(() => h.service.list().every((r) => r.status.state === 'running' || r.name === 'victim'));
  });

  it('nothing starts a machine marked for deletion: a delete that lands during a slow define wins', async () => {
    h = await new Harness({ config: quietResync }).start();
    await h.createRunning('doomed');
    await h.advance(2000);
    h.hv.setState(dom('doomed'), 'shutoff');
    h.hv.removeDomain(dom('doomed')); // undefined by hand: the next pass defines it again...
    h.hv.hold('defineDomain');
    await h.advanceUntil(() => h.hv.heldCalls('defineDomain') === 1, 5000);
    const startsBefore = starts('doomed');
    await h.service.delete('doomed', 30); // ...and the delete lands while that define is slow
    h.hv.resume('defineDomain');
    await h.advanceUntil(() => !h.exists('doomed'), 60_000);
    expect(starts('doomed')).toBe(startsBefore);
    const r = h.reasons('doomed');
    expect(r.slice(r.indexOf('DeletionRequested'))).not.toContain('Started');
    expect(r.at(-1)).toBe('Deleted');
  });

  it('leaveShutdown does not double the resync loop (Reconciler.start when running is a no-op)', async () => {
    h = await new Harness({ config: (c) => (c.machines.resyncIntervalSec = 10) }).start();
    await h.createRunning('r');
    const resyncsDuring = async (ms: number) => {
      const before = h.agent.reconciler.stats.resyncs;
      await h.advance(ms);
      return h.agent.reconciler.stats.resyncs - before;
    };
    const baseline = await resyncsDuring(25_000);
    h.agent.reconciler.start();
    h.agent.leaveShutdown();
    h.agent.leaveShutdown();
    await h.settle();
    expect(baseline).toBeGreaterThanOrEqual(2);
    expect(baseline).toBeLessThanOrEqual(3);
    expect(await resyncsDuring(25_000)).toBeLessThanOrEqual(baseline + 1);
  });
});
