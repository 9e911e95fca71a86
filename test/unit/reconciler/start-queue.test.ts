import { describe, expect, it } from 'vitest';
import { StartQueue } from '../../../src/reconciler/start-queue.js';
import { FakeClock } from '../../support/fakes/fake-clock.js';
import { deferred } from '../../support/deferred.js';

// The queue alone: who starts when, with starts that finish only when the test says so.

function rig(parallelism: number, delayMs: number) {
  const clock = new FakeClock();
  const began: { name: string; at: number }[] = [];
  const running = new Map<string, ReturnType<typeof deferred<void>>>();
  const errors: string[] = [];
  const queue = new StartQueue({
    clock,
    parallelism,
    delayMs,
    start: (name) => {
      began.push({ name, at: clock.now() });
      const d = deferred<void>();
      running.set(name, d);
      return d.promise;
    },
    onError: (name) => errors.push(name),
  });
  const finish = async (name: string) => {
    running.get(name)!.resolve();
    running.delete(name);
    await clock.advance(0);
  };
  return { clock, queue, began, running, errors, finish, order: () => began.map((b) => b.name) };
}

describe('StartQueue', () => {
  it.each([
    ['priority, then name', [['b', 1], ['a', 1], ['z', 9], ['m', 5]], ['z', 'm', 'a', 'b']],
    ['all equal: by name', [['c', 0], ['a', 0], ['b', 0]], ['a', 'b', 'c']],
    ['one machine', [['only', 3]], ['only']],
  ] as const)('a restore starts in order (%s)', async (_n, requests, expected) => {
    const r = rig(1, 0);
    const collected = r.queue.beginRestore();
    for (const [name, priority] of requests) expect(r.queue.request(name, priority)).toBe(false);
    await r.clock.advance(0);
    expect(r.began).toEqual([]); // nothing before the collection ends
    collected();
    for (const name of expected) {
      await r.clock.advance(0);
      await r.finish(name);
    }
    expect(r.order()).toEqual(expected);
  });

  it.each([1, 2, 4])('parallelism %i: that many in flight and no more, the next one as a slot frees', async (parallelism) => {
    const r = rig(parallelism, 0);
    const names = ['a', 'b', 'c', 'd', 'e', 'f'];
    for (const n of names) r.queue.request(n, 0);
    await r.clock.advance(0);
    expect(r.running.size).toBe(parallelism);
    await r.finish('a');
    expect(r.running.size).toBe(parallelism);
    expect(r.order()).toEqual(names.slice(0, parallelism + 1));
    expect(r.queue.maxInFlight).toBe(parallelism);
  });

  it('spaces starts by delayMs during a restore only; a start after it is not delayed', async () => {
    const r = rig(4, 10_000);
    const collected = r.queue.beginRestore();
    for (const n of ['a', 'b', 'c']) r.queue.request(n, 0);
    collected();
    await r.clock.advance(25_000);
    expect(r.began.map((b) => b.at - r.began[0].at)).toEqual([0, 10_000, 20_000]);
    for (const n of ['a', 'b', 'c']) await r.finish(n);
    const before = r.clock.now();
    expect(r.queue.request('late', 0)).toBe(true); // began at once
    await r.clock.advance(0);
    expect(r.began.at(-1)).toEqual({ name: 'late', at: before });
  });

  it('has() covers waiting and in flight; a second request is not a second start', async () => {
    const r = rig(1, 0);
    r.queue.request('a', 0);
    r.queue.request('b', 0);
    expect([r.queue.has('a'), r.queue.has('b'), r.queue.has('c')]).toEqual([true, true, false]);
    r.queue.request('a', 0);
    await r.clock.advance(0);
    await r.finish('a');
    await r.finish('b');
    expect(r.order()).toEqual(['a', 'b']);
    expect(r.queue.has('a')).toBe(false);
  });

  it('dropWaiting forgets what waits; what is in flight finishes; a start that throws goes to onError', async () => {
    const r = rig(1, 0);
    r.queue.request('a', 0);
    r.queue.request('b', 0);
    r.queue.dropWaiting();
    await r.clock.advance(0);
    r.running.get('a')!.reject(new Error('boom'));
    await r.clock.advance(0);
    expect(r.errors).toEqual(['a']);
    expect(r.order()).toEqual(['a']);
    expect(r.queue.has('b')).toBe(false);
  });
});
