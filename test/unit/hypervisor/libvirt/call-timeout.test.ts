import { describe, expect, it } from 'vitest';
import { DomainState, type Hypervisor as NativeHypervisor } from '@unraid/libvirt';
import { BoundedCalls, CallQueueTimeoutError, CallTimeoutError, withCallTimeout } from '../../../../src/hypervisor/libvirt/call-timeout.js';
import { LibvirtHypervisor } from '../../../../src/hypervisor/libvirt/libvirt-hypervisor.js';
import { FakeClock, flushMicrotasks } from '../../../support/fakes/fake-clock.js';
import { silentLogger } from '../../../../src/logging/logger.js';
import { isAgentError } from '../../../../src/machine/errors.js';

const never = () => new Promise<never>(() => {});

describe('withCallTimeout', () => {
  it('rejects a call that never settles with HypervisorUnavailable once the clock passes the limit', async () => {
    const clock = new FakeClock();
    let outcome: unknown;
    void withCallTimeout(clock, 5000, 'domainShutdown', never).catch((e: unknown) => (outcome = e));
    await clock.advance(4999);
    expect(outcome).toBeUndefined();
    await clock.advance(1);
    expect(outcome).toBeInstanceOf(CallTimeoutError);
    expect(isAgentError(outcome, 'HypervisorUnavailable')).toBe(true);
    expect((outcome as Error).message).toBe('libvirt call domainShutdown timed out after 5000 ms');
  });

  it.each([
    ['resolves', () => Promise.resolve(42), { value: 42 }],
    ['rejects', () => Promise.reject(new Error('Domain not found')), { error: 'Domain not found' }],
    ['throws synchronously', () => { throw new Error('sync'); }, { error: 'sync' }],
  ] as const)('passes through a call that %s in time and cancels its timer', async (_, call, expected) => {
    const clock = new FakeClock();
    const result = await withCallTimeout(clock, 1000, 'op', call as () => Promise<number>).then(
      (value) => ({ value }),
      (e: Error) => ({ error: e.message }),
    );
    expect(result).toEqual(expected);
    expect(clock.pendingTimers).toBe(0);
  });

  it('ignores a late answer after the timeout fired', async () => {
    const clock = new FakeClock();
    let finish!: (v: string) => void;
    const pending = withCallTimeout(clock, 10, 'op', () => new Promise<string>((r) => (finish = r)));
    const settled = pending.then((v) => v, (e: Error) => e.message);
    await clock.advance(10);
    finish('late');
    await flushMicrotasks();
    expect(await settled).toBe('libvirt call op timed out after 10 ms');
  });
});

/** A slot-holding call that answers `value` after ms of fake time (never, when ms is Infinity). */
const answerAfter = <T>(clock: FakeClock, ms: number, value: T) => () =>
  ms === Infinity ? never() : clock.sleep(ms).then(() => value);

/** Settles a promise into a plain outcome so a test can look at it while time moves. */
function track<T>(p: Promise<T>) {
  const t: { value?: T; error?: unknown } = {};
  void p.then((v) => (t.value = v), (e: unknown) => (t.error = e));
  return t;
}

describe('BoundedCalls', () => {
  const setup = (o: { slots?: number; callTimeoutMs?: number; queueTimeoutMs?: number } = {}) => {
    const clock = new FakeClock();
    const calls = new BoundedCalls({ clock, slots: o.slots ?? 1, callTimeoutMs: o.callTimeoutMs ?? 5000, queueTimeoutMs: o.queueTimeoutMs ?? 60_000 });
    return { clock, calls };
  };

  it('times a call from when it is issued, not from when it joined the queue', async () => {
    const { clock, calls } = setup();
    const first = track(calls.run('a', answerAfter(clock, 4000, 'a')));
    const second = track(calls.run('b', answerAfter(clock, 4000, 'b')));
    await clock.advance(7999); // b has waited 4 s and run ~4 s: 8 s in all, more than the 5 s limit
    expect(first.value).toBe('a');
    expect(second).toEqual({});
    await clock.advance(1);
    expect(second.value).toBe('b');
    expect(calls.stuck).toBe(0);
  });

  it('a call that waits too long for a slot fails with CallQueueTimeoutError, is never issued, and frees its place', async () => {
    const { clock, calls } = setup({ queueTimeoutMs: 2000 });
    const first = track(calls.run('a', answerAfter(clock, 3000, 'a')));
    let issued = false;
    const queued = track(calls.run('domainLookupByName(x)', () => ((issued = true), Promise.resolve('b'))));
    await clock.advance(2000);
    expect(queued.error).toBeInstanceOf(CallQueueTimeoutError);
    expect(queued.error).not.toBeInstanceOf(CallTimeoutError);
    expect(isAgentError(queued.error, 'HypervisorUnavailable')).toBe(true);
    expect((queued.error as Error).message).toBe('libvirt call domainLookupByName(x) not issued: all 1 call slots stayed busy for 2000 ms');
    await clock.advance(1000);
    expect(first.value).toBe('a');
    const after = track(calls.run('c', () => Promise.resolve('c')));
    await flushMicrotasks();
    expect(after.value).toBe('c');
    expect(issued).toBe(false);
  });

  it('a call libvirt never answers times out, keeps its slot and counts as stuck until it returns', async () => {
    const { clock, calls } = setup();
    let finish!: () => void;
    const hung = track(calls.run('getInfo', () => new Promise<void>((r) => (finish = r))));
    await clock.advance(5000);
    expect(hung.error).toBeInstanceOf(CallTimeoutError);
    expect(calls.stuck).toBe(1);
    const next = track(calls.run('next', () => Promise.resolve(1)));
    await flushMicrotasks();
    expect(next).toEqual({}); // the hung call still holds the only slot
    finish();
    await flushMicrotasks();
    expect(calls.stuck).toBe(0);
    expect(next.value).toBe(1);
  });
});

/** Just what LibvirtHypervisor.domainState uses of the binding; every call answers after `delayMs`. */
function fakeNative(clock: FakeClock, delayMs: number) {
  const counts = { opens: 0, calls: 0 };
  const native = {
    connectOpen: async () => void counts.opens++,
    connectClose: async () => undefined,
    domainLookupByName: (name: string) => {
      counts.calls++;
      return answerAfter(clock, delayMs, { getInfo: () => (counts.calls++, answerAfter(clock, delayMs, { state: DomainState.RUNNING })()) })();
    },
  };
  return { counts, createNative: () => native as unknown as NativeHypervisor };
}

describe('LibvirtHypervisor call timeouts', () => {
  const setup = (o: { delayMs: number; queueTimeoutMs?: number }) => {
    const clock = new FakeClock();
    const native = fakeNative(clock, o.delayMs);
    const hv = new LibvirtHypervisor({
      uri: 'test:///fake', callTimeoutMs: 5000, queueTimeoutMs: o.queueTimeoutMs, maxConcurrentCalls: 1,
      logger: silentLogger, clock, createNative: native.createNative,
    });
    return { clock, hv, counts: native.counts };
  };

  it('libvirt call timeouts count time spent waiting for a pool slot (defect): under load every call answers and the connection stays up', async () => {
    const { clock, hv, counts } = setup({ delayMs: 1000, queueTimeoutMs: 60_000 });
    await hv.connect();
    // 8 lookups + 8 getInfo through one slot, 1 s each: the last lookups wait up to 7 s for it.
    const names = ['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'];
    const states = names.map((n) => track(hv.domainState(`vmkeeper-${n}`)));
    await clock.advance(16_000);
    expect(states.map((s) => s.error ?? s.value)).toEqual(names.map(() => 'running'));
    expect(hv.isConnected()).toBe(true);
    expect(counts.opens).toBe(1);
  });

  it('a call that timed out while still queued marks a healthy connection broken (defect): it fails with CallQueueTimeoutError, the connection stays', async () => {
    const { clock, hv, counts } = setup({ delayMs: 3000, queueTimeoutMs: 2000 });
    await hv.connect();
    const busy = track(hv.domainState('vmkeeper-busy'));
    const queued = track(hv.domainState('vmkeeper-queued'));
    await clock.advance(2000);
    expect(queued.error).toBeInstanceOf(CallQueueTimeoutError);
    expect(hv.isConnected()).toBe(true);
    await clock.advance(4000);
    expect(busy.value).toBe('running');
    const later = track(hv.domainState('vmkeeper-later'));
    await clock.advance(6000);
    expect(later.value).toBe('running');
    expect(counts.opens).toBe(1);
  });

  it('a call libvirt does not answer within the timeout still marks the connection broken', async () => {
    const { clock, hv } = setup({ delayMs: Infinity });
    await hv.connect();
    const hung = track(hv.domainState('vmkeeper-hung'));
    await clock.advance(5000);
    expect(hung.error).toBeInstanceOf(CallTimeoutError);
    expect(hv.isConnected()).toBe(false);
  });
});
