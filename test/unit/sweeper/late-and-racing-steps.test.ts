import { afterEach, describe, expect, it } from 'vitest';
import { Harness } from '../../support/agent-harness.js';
import type { MemoryStore } from '../../support/memory-store.js';
import { domainNameFor as dom } from '../../../src/machine/names.js';
import type { MachineRecord } from '../../../src/machine/record.js';
import { deferred } from '../../support/deferred.js';

let h: Harness;
afterEach(async () => {
  await h?.agent.stop();
});

/** Holds every store write until the returned release is called, as a slow fsync would. */
function holdWrites(store: MemoryStore): () => void {
  const gate = deferred();
  const put = store.put.bind(store);
  store.put = async (record) => {
    await gate.promise;
    return put(record);
  };
  return () => {
    store.put = put;
    gate.resolve();
  };
}

/** Index of the first hypervisor call of op on the machine's domain, -1 if none. */
const callIndex = (x: Harness, op: string, name: string) => x.hv.calls.findIndex((c) => c.op === op && c.name === dom(name));

/** Keeps libvirt away until the machine's deadline has passed, so the sweeper's first step comes late. */
async function deleteWhileLibvirtIsDown(x: Harness, name: string, graceSec: number): Promise<number> {
  x.hv.setAvailable(false);
  await x.advance(2000);
  await x.service.delete(name, graceSec);
  const deadline = x.service.get(name).status.forceStopAt;
  await x.advance(graceSec * 1000 + 3000);
  expect(x.reasons(name)).not.toContain('ForceStopped');
  x.hv.setAvailable(true);
  return deadline;
}

describe('sweeper: a first step that comes after the deadline', () => {
  it('still presses the ACPI button before it destroys an ignoring guest', async () => {
    h = await new Harness({ behaviour: 'ignore' }).start();
    await h.createRunning('late');
    await deleteWhileLibvirtIsDown(h, 'late', 2);
    await h.advanceUntil(() => !h.exists('late'), 30_000, 10);
    const reasons = h.reasons('late');
    expect(reasons).toContain('ShutdownRequested');
    expect(reasons.indexOf('ShutdownRequested')).toBeLessThan(reasons.indexOf('ForceStopped'));
    expect(callIndex(h, 'shutdownDomain', 'late')).toBeGreaterThanOrEqual(0);
    expect(callIndex(h, 'shutdownDomain', 'late')).toBeLessThan(callIndex(h, 'destroyDomain', 'late'));
    expect(reasons.at(-1)).toBe('Deleted');
  });

  it('forces right after the press, without waiting for a retry interval', async () => {
    h = await new Harness({ behaviour: 'ignore', config: (c) => (c.machines.sweepIntervalSec = 3600) }).start();
    await h.createRunning('prompt');
    await deleteWhileLibvirtIsDown(h, 'prompt', 2);
    const back = h.clock.now();
    await h.advanceUntil(() => !h.exists('prompt'), 30_000, 10);
    const requested = h.event('prompt', 'ShutdownRequested')!;
    const forced = h.event('prompt', 'ForceStopped')!;
    // The reconnect is seen on the next 1 s poll; the force must not wait 5 s for a retry.
    expect(forced.timestamp - back).toBeLessThan(2000);
    expect(forced.timestamp - requested.timestamp).toBeLessThan(100);
  });

  it('finishes without a force stop when the late press alone turns the guest off', async () => {
    h = await new Harness({ behaviour: 'obey', shutdownDelayMs: 0 }).start();
    await h.createRunning('quick');
    await deleteWhileLibvirtIsDown(h, 'quick', 2);
    await h.advanceUntil(() => !h.exists('quick'), 30_000, 10);
    expect(h.reasons('quick')).toEqual(['Created', 'Started', 'DeletionRequested', 'ShutdownRequested', 'ShutdownCompleted', 'Deleted']);
    expect(callIndex(h, 'destroyDomain', 'quick')).toBe(-1);
  });

  it('a power-off whose first step comes late presses first too', async () => {
    h = await new Harness({ behaviour: 'ignore' }).start();
    await h.createRunning('off', JSON.stringify({ gracePeriodSec: 2, disks: [{ name: 'root', sizeGiB: 1 }] }));
    h.hv.setAvailable(false);
    await h.advance(2000);
    await h.service.setPower('off', 'off');
    await h.advance(5000);
    h.hv.setAvailable(true);
    await h.advanceUntil(() => h.service.get('off').status.state === 'stopped', 30_000, 10);
    const reasons = h.reasons('off');
    expect(reasons.indexOf('ShutdownRequested')).toBeGreaterThanOrEqual(0);
    expect(reasons.indexOf('ShutdownRequested')).toBeLessThan(reasons.indexOf('ForceStopped'));
  });

  it('grace 0 still destroys without a press', async () => {
    h = await new Harness({ behaviour: 'ignore' }).start();
    await h.createRunning('now');
    await deleteWhileLibvirtIsDown(h, 'now', 0);
    await h.advanceUntil(() => !h.exists('now'), 30_000, 10);
    expect(h.reasons('now')).toEqual(['Created', 'Started', 'DeletionRequested', 'ForceStopped', 'Deleted']);
    expect(callIndex(h, 'shutdownDomain', 'now')).toBe(-1);
  });
});

describe('sweeper: a delete that lands while a power-off finishes', () => {
  it('keeps its deadline and goes on to deletion', async () => {
    h = await new Harness({ behaviour: 'ignore' }).start();
    await h.createRunning('u', JSON.stringify({ gracePeriodSec: 30, disks: [{ name: 'root', sizeGiB: 1 }] }));
    await h.service.setPower('u', 'off');
    await h.advanceUntil(() => h.reasons('u').includes('ShutdownRequested'));
    const stored: MachineRecord[] = [];
    h.service.on('machineChanged', (r) => r.name === 'u' && stored.push(r));

    // A write in progress holds the record lock; the delete queues behind it, not yet applied.
    const release = holdWrites(h.store);
    void h.agent.records.update('u', (r) => {
      r.status.message = 'a slow write';
    });
    const deleted = h.service.delete('u', 60);
    // The guest goes off now: the sweeper's finish reads the record before the delete is applied.
    const queriesBefore = h.hv.calls.length;
    h.hv.setState(dom('u'), 'shutoff');
    await h.advanceUntil(() => h.hv.calls.slice(queriesBefore).some((c) => c.op === 'domainState' && c.name === dom('u')), 10_000, 10);
    await h.settle();
    release();
    await deleted;
    await h.advanceUntil(() => !h.exists('u'), 30_000, 10);

    const deleting = stored.filter((r) => r.deletionTimestamp > 0);
    expect(deleting.length).toBeGreaterThan(0);
    expect(deleting.filter((r) => r.status.forceStopAt === 0)).toEqual([]);
    expect(deleting.map((r) => r.status.state)).not.toContain('stopped');
    const reasons = h.reasons('u');
    expect(reasons.slice(reasons.indexOf('DeletionRequested'))).not.toContain('Stopped');
    expect(reasons.at(-1)).toBe('Deleted');
  });
});
