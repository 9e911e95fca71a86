import { describe, expect, it } from 'vitest';
import { flushMicrotasks } from '../../support/fakes/fake-clock.js';
import { Semaphore } from '../../../src/lifecycle/semaphore.js';
import { deferred } from '../../support/deferred.js';

/** Jobs that stay open until the test releases them, recording how many ran at once and in what order. */
function jobs() {
  let active = 0;
  let peak = 0;
  const started: string[] = [];
  const open = new Map<string, () => void>();
  const job = (name: string) => async () => {
    active++;
    peak = Math.max(peak, active);
    started.push(name);
    const d = deferred();
    open.set(name, d.resolve);
    await d.promise;
    active--;
    return name;
  };
  const finish = (name: string) => open.get(name)!();
  return { job, finish, started, peak: () => peak };
}

describe('Semaphore', () => {
  it('runs at most limit jobs at once and starts the waiting ones in order', async () => {
    const s = new Semaphore(2);
    const j = jobs();
    const results = ['a', 'b', 'c', 'd'].map((n) => s.run(j.job(n)));
    await flushMicrotasks();
    expect(j.started).toEqual(['a', 'b']);
    j.finish('b');
    await flushMicrotasks();
    expect(j.started).toEqual(['a', 'b', 'c']);
    j.finish('a');
    j.finish('c');
    await flushMicrotasks();
    j.finish('d');
    expect(await Promise.all(results)).toEqual(['a', 'b', 'c', 'd']);
    expect(j.peak()).toBe(2);
  });

  it('a caller that arrives while a freed slot is being handed over waits its turn', async () => {
    const s = new Semaphore(1);
    const j = jobs();
    const first = deferred<string>();
    const a = s.run(() => first.promise);
    const b = s.run(j.job('b'));
    let c: Promise<string> | undefined;
    // Reacts to a's end right after the semaphore does: between a's release and b's wake-up.
    void first.promise.then(() => (c = s.run(j.job('c'))));
    first.resolve('a');
    await flushMicrotasks();
    expect(j.started).toEqual(['b']);
    j.finish('b');
    await flushMicrotasks();
    expect(j.started).toEqual(['b', 'c']);
    j.finish('c');
    expect(await Promise.all([a, b, c])).toEqual(['a', 'b', 'c']);
    expect(j.peak()).toBe(1);
  });

  it('a failing job frees its slot and its error reaches the caller', async () => {
    const s = new Semaphore(1);
    const failed = s.run(async () => {
      throw new Error('boom');
    });
    const next = s.run(async () => 'next');
    await expect(failed).rejects.toThrow('boom');
    await expect(next).resolves.toBe('next');
  });

  it.each([0, -1, 1.5, Number.NaN])('refuses a limit of %s, which could never run a job', (limit) => {
    expect(() => new Semaphore(limit)).toThrow(RangeError);
  });
});
