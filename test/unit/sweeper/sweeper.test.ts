import { afterEach, describe, expect, it } from 'vitest';
import { Harness } from '../../support/agent-harness.js';
import { domainNameFor } from '../../../src/machine/names.js';
import { AgentError } from '../../../src/machine/errors.js';

const dom = domainNameFor;
let h: Harness;
afterEach(async () => {
  await h?.agent.stop();
});

describe('sweeper: graceful deletion', () => {
  it('an obeying guest shuts down long before the deadline and everything is removed', async () => {
    h = await new Harness({ behaviour: 'obey', shutdownDelayMs: 2000 }).start();
    await h.createRunning('web-1');
    const requestedAt = h.clock.now();
    await h.service.delete('web-1', 60);
    expect(h.service.get('web-1').status).toMatchObject({ state: 'terminating', forceStopAt: requestedAt + 60_000 });
    const took = await h.advanceUntil(() => !h.exists('web-1'));
    expect(took).toBeLessThan(4000); // 2 s guest shutdown + one 1 s poll
    expect(h.reasons('web-1')).toEqual(['Created', 'Started', 'DeletionRequested', 'ShutdownRequested', 'ShutdownCompleted', 'Deleted']);
    expect(h.hv.stateOf(dom('web-1'))).toBeUndefined();
    expect([...h.disks.removed]).toContain('/state/guests/web-1');
    expect(h.store.records.has('web-1')).toBe(false);
  });

  it('an ignoring guest gets the button again and again, then is destroyed at the deadline itself', async () => {
    h = await new Harness({ behaviour: 'ignore', config: (c) => (c.machines.sweepIntervalSec = 3600) }).start();
    await h.createRunning('db');
    await h.service.delete('db', 20);
    const deadline = h.service.get('db').status.forceStopAt;
    await h.advanceUntil(() => !h.exists('db'), 60_000, 10);
    const forced = h.event('db', 'ForceStopped')!;
    expect(forced.type).toBe('warning');
    expect(forced.timestamp - deadline).toBeGreaterThanOrEqual(0);
    expect(forced.timestamp - deadline).toBeLessThan(100); // not on the hour-long sweep
    expect(h.reasons('db').filter((r) => r === 'ShutdownRetried')).toHaveLength(3); // at 5, 10, 15 s
    expect(h.hv.calls.filter((c) => c.op === 'shutdownDomain' && c.name === dom('db'))).toHaveLength(4);
    expect(h.reasons('db')).not.toContain('ShutdownCompleted');
    expect(h.reasons('db').at(-1)).toBe('Deleted');
  });

  it('a repeat delete never moves the deadline; an explicit shorter grace moves it earlier only', async () => {
    h = await new Harness({ behaviour: 'ignore' }).start();
    await h.createRunning('m');
    const t0 = h.clock.now();
    await h.service.delete('m', 60);
    await h.advance(1000);
    await h.service.delete('m');
    expect(h.service.get('m').status.forceStopAt).toBe(t0 + 60_000);
    await h.service.delete('m', 120);
    expect(h.service.get('m').status.forceStopAt).toBe(t0 + 60_000);
    await h.service.delete('m', 10);
    expect(h.service.get('m').status.forceStopAt).toBe(t0 + 11_000);
    expect(h.reasons('m').filter((r) => r === 'DeletionRequested')).toHaveLength(1);
    await h.advanceUntil(() => !h.exists('m'), 20_000, 10);
    expect(h.event('m', 'ForceStopped')!.timestamp).toBe(t0 + 11_000);
  });

  it('grace 0 force-stops at once', async () => {
    h = await new Harness({ behaviour: 'obey' }).start();
    await h.createRunning('z');
    await h.service.delete('z', 0);
    await h.settle();
    expect(h.exists('z')).toBe(false);
    expect(h.reasons('z')).toEqual(['Created', 'Started', 'DeletionRequested', 'ForceStopped', 'Deleted']);
  });

  it('a machine whose domain never ran is removed at once', async () => {
    h = await new Harness().start();
    await h.service.create('cold', JSON.stringify({ power: 'off', disks: [{ name: 'root', sizeGiB: 1 }] }));
    await h.advanceUntil(() => h.service.get('cold').status.state === 'stopped');
    await h.service.delete('cold');
    await h.settle();
    expect(h.exists('cold')).toBe(false);
    expect(h.hv.shutdownRequests(dom('cold'))).toBe(0);
  });

  it('a hung destroy on one machine does not delay the force stop of another', async () => {
    h = await new Harness({ behaviour: 'ignore' }).start();
    await h.createRunning('stuck');
    await h.createRunning('other');
    h.hv.setGuestBehaviour(dom('stuck'), 'hang');
    await h.service.delete('stuck', 0);
    await h.service.delete('other', 5);
    const deadline = h.service.get('other').status.forceStopAt;
    await h.advanceUntil(() => !h.exists('other'), 20_000, 10);
    expect(h.event('other', 'ForceStopped')!.timestamp - deadline).toBeLessThan(100);
    expect(h.exists('stuck')).toBe(true);
    h.hv.release(dom('stuck'));
    await h.advanceUntil(() => !h.exists('stuck'));
  });
});

describe('sweeper: restarts and failures', () => {
  it.each([
    ['before the first shutdown request is sent', 0],
    ['after one retry', 7000],
    ['just before the deadline', 19_900],
  ])('a restart %s keeps the deadline and does not request twice', async (_name, runFor) => {
    h = await new Harness({ behaviour: 'ignore' }).start();
    await h.createRunning('r');
    await h.service.delete('r', 20);
    const deadline = h.service.get('r').status.forceStopAt;
    await h.advance(runFor, 10);
    await h.restart();
    expect(h.service.get('r').status.forceStopAt).toBe(deadline);
    await h.advanceUntil(() => !h.exists('r'), 60_000, 10);
    expect(h.event('r', 'ForceStopped')!.timestamp - deadline).toBeLessThan(100);
    expect(h.reasons('r').filter((x) => x === 'ShutdownRequested').length).toBeLessThanOrEqual(1);
    expect(h.hv.stateOf(dom('r'))).toBeUndefined();
  });

  it('a restart after the guest went off but before cleanup finishes the cleanup', async () => {
    h = await new Harness({ behaviour: 'obey' }).start();
    await h.createRunning('c');
    h.hv.failNext('undefineDomain', new Error('transient'));
    await h.service.delete('c', 30);
    await h.advanceUntil(() => h.reasons('c').includes('CleanupFailed'));
    await h.restart();
    await h.advanceUntil(() => !h.exists('c'));
    expect(h.hv.stateOf(dom('c'))).toBeUndefined();
  });

  it.each([
    ['undefining the domain', (x: Harness) => x.hv.failNext('undefineDomain', new Error('libvirt said no'))],
    ['removing the disks', (x: Harness) => x.disks.failNext('removePath', new Error('EBUSY'))],
    ['destroying the domain', (x: Harness) => x.hv.failNext('destroyDomain', new Error('device busy'))],
    ['writing the record', (x: Harness) => x.store.failNextWrites(1)],
  ])('a failure while %s is reported as CleanupFailed and retried until done', async (_name, inject) => {
    h = await new Harness({ behaviour: 'ignore' }).start();
    await h.createRunning('f');
    await h.service.delete('f', 5);
    inject(h);
    await h.advanceUntil(() => !h.exists('f'), 120_000);
    expect(h.reasons('f')).toContain('CleanupFailed');
    expect(h.reasons('f').at(-1)).toBe('Deleted');
    expect(h.hv.stateOf(dom('f'))).toBeUndefined();
  });

  it('waits while libvirt is down and finishes the deletion when it is back', async () => {
    h = await new Harness({ behaviour: 'obey' }).start();
    await h.createRunning('d');
    h.hv.setAvailable(false);
    await h.advance(2000);
    expect(h.service.info()).toMatchObject({ state: 'degraded', libvirtConnected: false });
    await h.service.delete('d', 30);
    await h.advance(5000);
    expect(h.exists('d')).toBe(true);
    h.hv.setAvailable(true);
    await h.advanceUntil(() => !h.exists('d'));
    expect(h.service.info()).toMatchObject({ state: 'running', libvirtConnected: true });
  });
});

describe('sweeper: power off and on', () => {
  it('powers off gracefully, keeps the machine, and powers on again', async () => {
    h = await new Harness({ behaviour: 'obey' }).start();
    await h.createRunning('p');
    await h.service.setPower('p', 'off');
    expect(h.service.get('p').status.state).toBe('stopping');
    await h.advanceUntil(() => h.service.get('p').status.state === 'stopped');
    expect(h.hv.stateOf(dom('p'))).toBe('shutoff');
    expect(h.service.get('p').status).toMatchObject({ forceStopAt: 0, shutdownRequestedAt: 0 });
    expect(h.reasons('p')).toEqual(expect.arrayContaining(['ShutdownRequested', 'ShutdownCompleted', 'Stopped']));
    await h.service.setPower('p', 'on');
    await h.advanceUntil(() => h.hv.stateOf(dom('p')) === 'running' && h.service.get('p').status.state === 'running');
    expect([...h.disks.removed]).not.toContain('/state/guests/p');
  });

  it('force-stops an ignoring guest at its grace period on power off', async () => {
    h = await new Harness({ behaviour: 'ignore' }).start();
    await h.createRunning('q', JSON.stringify({ gracePeriodSec: 8, disks: [{ name: 'root', sizeGiB: 1 }] }));
    const t0 = h.clock.now();
    await h.service.setPower('q', 'off');
    await h.advanceUntil(() => h.service.get('q').status.state === 'stopped', 30_000, 10);
    expect(h.event('q', 'ForceStopped')!.timestamp - (t0 + 8000)).toBeLessThan(100);
  });

  it('refuses power changes on a machine being deleted', async () => {
    h = await new Harness({ behaviour: 'ignore' }).start();
    await h.createRunning('t');
    await h.service.delete('t', 60);
    await expect(h.service.setPower('t', 'on')).rejects.toMatchObject({ kind: 'MachineTerminating' });
    await expect(h.service.setPower('t', 'sideways')).rejects.toBeInstanceOf(AgentError);
  });

  it('a delete during a power-off keeps the sooner deadline', async () => {
    h = await new Harness({ behaviour: 'ignore' }).start();
    await h.createRunning('u', JSON.stringify({ gracePeriodSec: 10, disks: [{ name: 'root', sizeGiB: 1 }] }));
    const t0 = h.clock.now();
    await h.service.setPower('u', 'off');
    await h.service.delete('u', 300);
    expect(h.service.get('u').status.forceStopAt).toBe(t0 + 10_000);
    await h.advanceUntil(() => !h.exists('u'), 30_000, 10);
  });
});
