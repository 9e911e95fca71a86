import { describe, expect, it } from 'vitest';
import { flushMicrotasks } from '../../support/fakes/fake-clock.js';
import { KeyedLock } from '../../../src/lifecycle/keyed-lock.js';
import { deferred } from '../../support/deferred.js';

describe('KeyedLock', () => {
  it('runs work on one key one at a time, in call order', async () => {
    const lock = new KeyedLock();
    const order: string[] = [];
    const first = deferred();
    const a = lock.run('k', async () => {
      order.push('a start');
      await first.promise;
      order.push('a end');
    });
    const b = lock.run('k', async () => void order.push('b'));
    await flushMicrotasks();
    expect(order).toEqual(['a start']);
    first.resolve();
    await Promise.all([a, b]);
    expect(order).toEqual(['a start', 'a end', 'b']);
  });

  it('lets different keys run at the same time', async () => {
    const lock = new KeyedLock();
    const held = deferred();
    void lock.run('x', () => held.promise);
    const other = await lock.run('y', async () => 'y done');
    expect(other).toBe('y done');
    expect(lock.isBusy('x')).toBe(true);
    held.resolve();
  });

  it('a failure reaches its caller only and does not block the next work on the key', async () => {
    const lock = new KeyedLock();
    const failed = lock.run('k', async () => {
      throw new Error('first failed');
    });
    const thrown = lock.run('k', () => {
      throw new Error('thrown before a promise');
    });
    const next = lock.run('k', async () => 'next ran');
    await expect(failed).rejects.toThrow('first failed');
    await expect(thrown).rejects.toThrow('thrown before a promise');
    await expect(next).resolves.toBe('next ran');
  });

  it('is busy while work is queued or running and idle once the last one ends', async () => {
    const lock = new KeyedLock();
    expect(lock.isBusy('k')).toBe(false);
    const held = deferred();
    const a = lock.run('k', () => held.promise);
    const b = lock.run('k', async () => undefined);
    expect(lock.isBusy('k')).toBe(true);
    held.resolve();
    await Promise.all([a, b]);
    await flushMicrotasks();
    expect(lock.isBusy('k')).toBe(false);
  });

  it('whenIdle resolves once no key has work left, and at once when none has', async () => {
    const lock = new KeyedLock();
    await lock.whenIdle();
    const x = deferred();
    const y = deferred();
    void lock.run('x', () => x.promise);
    const yRun = lock.run('y', () => y.promise).catch(() => 'rejected');
    expect(lock.busyKeys()).toEqual(['x', 'y']);
    let idle = false;
    void lock.whenIdle().then(() => void (idle = true));
    x.resolve();
    await flushMicrotasks();
    expect(idle).toBe(false);
    expect(lock.busyKeys()).toEqual(['y']);
    y.reject(new Error('a failed step still ends'));
    await flushMicrotasks();
    expect(idle).toBe(true);
    expect(lock.busyKeys()).toEqual([]);
    expect(await yRun).toBe('rejected');
  });
});
