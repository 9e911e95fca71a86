import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { DomainObserver } from '../../../src/domains/domain-observer.js';
import { silentLogger } from '../../../src/logging/logger.js';
import { FakeClock } from '../../support/fakes/fake-clock.js';
import { FakeHypervisor } from '../../support/fakes/fake-hypervisor.js';
import { FULL_MS, POLL_MS, a, b, c, type SeenSnapshot } from './observer-fixture.js';

// Each tick asks only which domains are active; the full listing (and a snapshot for the
// listeners) comes when that set changed, after a reconnect, and every full-list interval.


let clock: FakeClock;
let hv: FakeHypervisor;
let observer: DomainObserver;
let snapshots: SeenSnapshot[];
let connection: boolean[];

beforeEach(async () => {
  clock = new FakeClock();
  hv = new FakeHypervisor({ clock });
  hv.addDomain(a, 'running');
  hv.addDomain(b, 'shutoff');
  snapshots = [];
  connection = [];
  observer = new DomainObserver({
    hypervisor: hv,
    clock,
    logger: silentLogger,
    pollIntervalMs: POLL_MS,
    fullListIntervalMs: FULL_MS,
    useEvents: true, // the fake has none unless asked: this suite polls
    listener: {
      onSnapshot: (snapshot, changed) => void snapshots.push({ snapshot, changed: [...changed].sort() }),
      onConnectionChange: (connected) => void connection.push(connected),
    },
  });
  await observer.start();
});

afterEach(async () => {
  await observer.stop();
});

/** The listing calls made while time moves on by ms. */
async function listingsDuring(ms: number): Promise<{ active: number; full: number }> {
  const from = hv.calls.length;
  await clock.advance(ms);
  const ops = hv.calls.slice(from).map((call) => call.op);
  return { active: ops.filter((op) => op === 'listActiveDomainNames').length, full: ops.filter((op) => op === 'listDomains').length };
}

describe('DomainObserver', () => {
  it('starts with a full listing that reports every domain', () => {
    expect(snapshots).toHaveLength(1);
    expect(snapshots[0]!.changed).toEqual([a, b]);
    expect(observer.domain(a)?.state).toBe('running');
    expect(connection).toEqual([true]);
  });

  it('while nothing changes, ticks ask only for the active domains and report nothing', async () => {
    const calls = await listingsDuring(10 * POLL_MS);
    expect(calls).toEqual({ active: 10, full: 0 });
    expect(snapshots).toHaveLength(1);
  });

  it.each([
    ['a domain starts', () => hv.setState(b, 'running'), b, 'running'],
    ['a domain stops', () => hv.setState(a, 'shutoff'), a, 'shutoff'],
    ['a running domain crashes', () => hv.setState(a, 'crashed'), a, 'crashed'],
  ] as const)('%s: the next tick lists every domain and reports the change', async (_what, change, domain, state) => {
    change();
    const calls = await listingsDuring(POLL_MS);
    expect(calls.full).toBe(1);
    expect(snapshots.at(-1)!.changed).toEqual([domain]);
    expect(observer.domain(domain)?.state).toBe(state);
  });

  it.each([
    ['a domain is defined while off', () => hv.addDomain(c, 'shutoff'), c, 'shutoff'],
    ['a shut-off domain is undefined', () => hv.removeDomain(b), b, undefined],
    ['a running domain is paused', () => hv.setState(a, 'paused'), a, 'paused'],
  ] as const)('%s (the active set stays the same): seen at the next full listing', async (_what, change, domain, state) => {
    change();
    expect(await listingsDuring(FULL_MS - 2 * POLL_MS)).toMatchObject({ full: 0 });
    expect(snapshots).toHaveLength(1);
    expect(await listingsDuring(2 * POLL_MS)).toMatchObject({ full: 1 });
    expect(snapshots.at(-1)!.changed).toEqual([domain]);
    expect(observer.domain(domain)?.state).toBe(state);
  });

  it('a state the agent noted itself needs no full listing when libvirt agrees', async () => {
    await hv.startDomain(b);
    observer.noteState(b, 'running');
    expect(await listingsDuring(3 * POLL_MS)).toEqual({ active: 3, full: 0 });
    expect(observer.domain(b)?.state).toBe('running');
  });

  it('a guest that died before the first tick after the agent started it still shows as a change', async () => {
    observer.noteState(b, 'running'); // the start call returned, then the guest died at once
    expect(await listingsDuring(POLL_MS)).toMatchObject({ full: 1 });
    expect(snapshots.at(-1)!.changed).toEqual([b]);
    expect(observer.domain(b)?.state).toBe('shutoff');
  });

  it('libvirt gone: disconnected at the next tick; back: a full listing before cheap ticks resume', async () => {
    hv.setAvailable(false);
    await clock.advance(POLL_MS);
    expect(connection).toEqual([true, false]);
    expect(observer.isConnected).toBe(false);
    hv.setState(b, 'running'); // changed while we could not look
    hv.setAvailable(true);
    const back = await listingsDuring(POLL_MS);
    expect(back.full).toBe(1);
    expect(connection).toEqual([true, false, true]);
    expect(snapshots.at(-1)!.changed).toEqual([b]);
    expect(await listingsDuring(3 * POLL_MS)).toEqual({ active: 3, full: 0 });
  });
});
