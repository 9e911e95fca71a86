import { afterEach, describe, expect, it } from 'vitest';
import { Harness } from '../../support/agent-harness.js';

// The poll and the resync must not cost per unchanged machine: with many settled machines, each
// poll is one listing and a resync writes nothing, asks libvirt nothing and runs no pass for them.
let h: Harness;
const COUNT = 300;
const spec = JSON.stringify({ cpus: 1, memoryMiB: 128, disks: [{ name: 'root', sizeGiB: 1 }], power: 'off' });

afterEach(async () => {
  await h?.agent.stop();
});

describe('reconciler and observer: settled machines cost O(1) libvirt calls', () => {
  it(`${COUNT} stopped machines: 20 polls and 2 resyncs issue only the cheap active listing (the full one at each resync) and no record write`, async () => {
    h = await new Harness({ config: (c) => (c.machines.resyncIntervalSec = 10) }).start();
    for (let i = 0; i < COUNT; i++) await h.service.create(`m-${i}`, spec);
    await h.advanceUntil(() => h.service.list().every((r) => r.status.state === 'stopped'));
    await h.advance(11_000); // one resync after settling, so every identity is cached
    const callsBefore = h.hv.calls.length;
    const writesBefore = h.store.writes;
    const passesBefore = h.agent.reconciler.stats.passes;
    await h.advance(20 * h.config.machines.pollIntervalMs);
    const ops = h.hv.calls.slice(callsBefore).map((c) => c.op);
    // The resyncs ran (two full listings) but found nothing unsettled: no pass, no lock, no promise per machine.
    expect(h.agent.reconciler.stats.passes - passesBefore).toBe(0);
    // (A driver without events is asked again for them once per resync.)
    expect(ops.every((op) => op === 'listActiveDomainNames' || op === 'listDomains' || op === 'watchDomainEvents')).toBe(true);
    expect(ops.length).toBeLessThanOrEqual(28); // about one listing a poll, whatever COUNT is
    // Nothing ran or stopped: every domain is listed only at the resyncs (20 s at one per 10 s).
    expect(ops.filter((op) => op === 'listDomains').length).toBeLessThanOrEqual(3);
    expect(h.store.writes - writesBefore).toBe(0);
  });

  it(`${COUNT} stopped machines with domain events: 20 s idle cost only the resync listings, and an outside stop is seen at once`, async () => {
    h = await new Harness({ events: true, config: (c) => (c.machines.resyncIntervalSec = 10) }).start();
    for (let i = 0; i < COUNT; i++) await h.service.create(`m-${i}`, spec);
    await h.advanceUntil(() => h.service.list().every((r) => r.status.state === 'stopped'));
    await h.advance(11_000);
    expect(h.agent.observer.followsEvents).toBe(true);
    const callsBefore = h.hv.calls.length;
    const passesBefore = h.agent.reconciler.stats.passes;
    await h.advance(20_000);
    const ops = h.hv.calls.slice(callsBefore).map((c) => c.op);
    expect(h.agent.reconciler.stats.passes - passesBefore).toBe(0);
    // No poll at all: the only calls are the full listings, one per resync (20 s at one per 10 s).
    expect(ops.filter((op) => op !== 'listDomains')).toEqual([]);
    expect(ops.length).toBeLessThanOrEqual(3);

    // A guest started outside the agent, with its power off: seen from the event alone, long
    // before the next listing, and powered off again.
    const eventAt = h.hv.calls.length;
    h.hv.setState('vmkeeper-m-7', 'running');
    await h.advance(100);
    const afterEvent = h.hv.calls.slice(eventAt);
    expect(afterEvent.filter((c) => c.op === 'listDomains' || c.op === 'listActiveDomainNames')).toEqual([]);
    expect(afterEvent).toContainEqual({ op: 'domainState', name: 'vmkeeper-m-7' });
    expect(h.agent.observer.domain('vmkeeper-m-7')?.state).toBe('running');
    await h.advanceUntil(() => h.hv.stateOf('vmkeeper-m-7') === 'shutoff', 60_000);
  });

  it('a change the poll cannot see (a domain paused behind our back) is passed over at the resync full listing', async () => {
    h = await new Harness({ config: (c) => (c.machines.resyncIntervalSec = 10) }).start();
    await h.createRunning('held');
    await h.advance(11_000);
    const passesBefore = h.agent.reconciler.stats.passes;
    h.hv.setState('vmkeeper-held', 'paused'); // invisible to the poll: the active set is the same
    await h.advance(21_000);
    expect(h.agent.reconciler.stats.passes - passesBefore).toBeGreaterThanOrEqual(1);
  });
});
