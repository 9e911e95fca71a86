import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { DomainObserver } from '../../../src/domains/domain-observer.js';
import { silentLogger } from '../../../src/logging/logger.js';
import { domainNameFor } from '../../../src/machine/names.js';
import { FakeClock } from '../../support/fakes/fake-clock.js';
import { FakeHypervisor } from '../../support/fakes/fake-hypervisor.js';
import { FULL_MS, POLL_MS, a, b, c, type SeenSnapshot } from './observer-fixture.js';

// With domain events, nothing is polled: a domain's event brings a look at that domain alone, and
// every domain is listed only at the full-list interval (the safety net). Lost events, or none to
// be had, bring the poll back.


let clock: FakeClock;
let hv: FakeHypervisor;
let observer: DomainObserver | undefined;
let snapshots: SeenSnapshot[];

function startObserver(opts: { events?: boolean; useEvents?: boolean } = {}): Promise<void> {
  hv = new FakeHypervisor({ clock, events: opts.events ?? true });
  hv.addDomain(a, 'running');
  hv.addDomain(b, 'shutoff');
  observer = new DomainObserver({
    hypervisor: hv,
    clock,
    logger: silentLogger,
    pollIntervalMs: POLL_MS,
    fullListIntervalMs: FULL_MS,
    useEvents: opts.useEvents ?? true,
    listener: {
      onSnapshot: (snapshot, changed) => void snapshots.push({ snapshot, changed: [...changed].sort() }),
      onConnectionChange: () => undefined,
    },
  });
  return observer.start();
}

beforeEach(() => {
  clock = new FakeClock();
  snapshots = [];
  observer = undefined;
});

afterEach(async () => {
  await observer?.stop();
});

/** The hypervisor calls made while time moves on by ms. */
async function opsDuring(ms: number): Promise<string[]> {
  const from = hv.calls.length;
  await clock.advance(ms);
  return hv.calls.slice(from).map((call) => call.op);
}

const count = (ops: string[], op: string) => ops.filter((o) => o === op).length;

describe('DomainObserver with domain events', () => {
  it('subscribes before its first listing, then polls nothing: one full listing per interval', async () => {
    await startObserver();
    expect(hv.calls.map((call) => call.op).slice(0, 3)).toEqual(['connect', 'watchDomainEvents', 'listDomains']);
    expect(observer!.followsEvents).toBe(true);
    const ops = await opsDuring(2 * FULL_MS);
    expect(ops).toEqual(['listDomains', 'listDomains']);
    expect(snapshots.slice(1).map((s) => s.changed)).toEqual([[], []]); // nothing changed
  });

  it('an event brings a look at that domain alone and reports its change', async () => {
    await startObserver();
    const from = hv.calls.length;
    hv.setState(b, 'running');
    await clock.advance(0);
    expect(hv.calls.slice(from)).toEqual([{ op: 'domainState', name: b }]);
    expect(snapshots.at(-1)!.changed).toEqual([b]);
    expect(observer!.domain(b)?.state).toBe('running');
  });

  it('a domain defined or undefined outside shows up or vanishes from its event', async () => {
    await startObserver();
    hv.addDomain(c, 'shutoff');
    await clock.advance(0);
    expect(snapshots.at(-1)!.changed).toEqual([c]);
    expect(observer!.domain(c)?.state).toBe('shutoff');
    hv.removeDomain(b);
    await clock.advance(0);
    expect(snapshots.at(-1)!.changed).toEqual([b]);
    expect(observer!.domain(b)).toBeUndefined();
    expect(observer!.lastSnapshot.has(b)).toBe(false);
  });

  it('events that change nothing the agent sees (a redefinition) report nothing', async () => {
    await startObserver();
    const before = snapshots.length;
    const from = hv.calls.length;
    hv.setState(a, 'running');
    await clock.advance(0);
    expect(hv.calls.slice(from)).toEqual([{ op: 'domainState', name: a }]); // looked, found no change
    expect(snapshots).toHaveLength(before);
  });

  it('a burst of events (a host starting every guest) is answered by one full listing', async () => {
    await startObserver();
    for (let i = 0; i < 100; i++) hv.addDomain(domainNameFor(`m${i}`), 'running');
    const ops = await opsDuring(0);
    expect(count(ops, 'domainState')).toBe(0);
    expect(count(ops, 'listDomains')).toBe(1);
    expect(snapshots.at(-1)!.changed).toHaveLength(100);
  });

  it('events lost (libvirtd closed the connection): a full listing at once, then events again', async () => {
    await startObserver();
    hv.loseEvents('the connection closed');
    expect(observer!.followsEvents).toBe(false);
    hv.setState(b, 'running'); // while no one listens
    const ops = await opsDuring(0);
    expect(ops).toEqual(['watchDomainEvents', 'listDomains']);
    expect(snapshots.at(-1)!.changed).toEqual([b]);
    expect(observer!.followsEvents).toBe(true);
    expect(hv.eventWatches).toBe(1);
  });

  it('events lost and libvirtd not back yet: a full listing at once, and a new subscription at each poll until one works', async () => {
    await startObserver();
    hv.failNext('watchDomainEvents', new Error('cannot connect: Connection refused'));
    hv.failNext('watchDomainEvents', new Error('cannot connect: Connection refused'));
    hv.setState(b, 'paused'); // unseen by the poll's active set: only a full listing shows it
    hv.loseEvents('libvirtd restarted');
    let ops = await opsDuring(0);
    expect(ops).toEqual(['watchDomainEvents', 'listDomains']);
    expect(observer!.domain(b)?.state).toBe('paused');
    ops = await opsDuring(POLL_MS);
    expect(ops).toEqual(['watchDomainEvents', 'listActiveDomainNames']); // failed again: polled meanwhile
    ops = await opsDuring(POLL_MS);
    expect(ops[0]).toBe('watchDomainEvents');
    expect(observer!.followsEvents).toBe(true);
  });

  it('stop() waits for an event lookup in flight, which then changes and reports nothing', async () => {
    await startObserver();
    hv.hold('domainState');
    hv.setState(b, 'running');
    await clock.advance(0);
    expect(hv.heldCalls('domainState')).toBe(1);
    const before = snapshots.length;
    let stopped = false;
    const stopping = observer!.stop().then(() => (stopped = true));
    await clock.advance(0);
    expect(stopped).toBe(false);
    const from = hv.calls.length;
    hv.resume('domainState');
    await stopping;
    await clock.advance(10 * FULL_MS);
    expect(hv.calls.slice(from)).toEqual([]);
    expect(snapshots).toHaveLength(before);
    expect(observer!.domain(b)?.state).toBe('shutoff');
  });

  it('libvirt gone: its events end and the poll takes over; back: subscribed again', async () => {
    await startObserver();
    hv.setAvailable(false);
    await clock.advance(0);
    expect(observer!.isConnected).toBe(false);
    expect(observer!.followsEvents).toBe(false);
    expect(count(await opsDuring(3 * POLL_MS), 'connect')).toBe(3); // retried every poll
    hv.setAvailable(true);
    await clock.advance(POLL_MS);
    expect(observer!.isConnected).toBe(true);
    expect(observer!.followsEvents).toBe(true);
    expect(await opsDuring(FULL_MS)).toEqual(['listDomains']);
  });

  it('a hypervisor without events is polled, and asked for events again once per full listing', async () => {
    await startObserver({ events: false });
    expect(observer!.followsEvents).toBe(false);
    const ops = await opsDuring(FULL_MS);
    expect(count(ops, 'listActiveDomainNames')).toBeGreaterThanOrEqual(FULL_MS / POLL_MS - 2);
    expect(count(ops, 'watchDomainEvents')).toBe(1);
  });

  it('events turned off: never subscribed, polled as before', async () => {
    await startObserver({ useEvents: false });
    const ops = await opsDuring(5 * POLL_MS);
    expect(count(ops, 'watchDomainEvents')).toBe(0);
    expect(count(ops, 'listActiveDomainNames')).toBe(5);
    expect(hv.eventWatches).toBe(0);
  });

  it('stop() closes the event watch', async () => {
    await startObserver();
    expect(hv.eventWatches).toBe(1);
    await observer!.stop();
    expect(hv.eventWatches).toBe(0);
  });

  it('a lookup and a listing never overlap: an event during a listing is looked at after it', async () => {
    await startObserver();
    hv.hold('listDomains');
    const polled = observer!.pollNow();
    await clock.advance(0);
    hv.setState(b, 'running'); // the listing in flight may or may not have seen this
    await clock.advance(0);
    expect(hv.calls.filter((call) => call.op === 'domainState')).toEqual([]);
    hv.resume('listDomains');
    await polled;
    await clock.advance(0);
    expect(hv.calls.at(-1)).toEqual({ op: 'domainState', name: b });
    expect(observer!.domain(b)?.state).toBe('running');
  });
});
