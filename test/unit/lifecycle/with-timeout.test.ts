import { describe, expect, it } from 'vitest';
import { FakeClock } from '../../support/fakes/fake-clock.js';
import { withTimeout } from '../../../src/lifecycle/with-timeout.js';
import { deferred } from '../../support/deferred.js';

const timedOut = () => new Error('timed out');

describe('withTimeout', () => {
  it('resolves with the call and leaves no timer behind', async () => {
    const clock = new FakeClock();
    await expect(withTimeout(clock, 1000, async () => 'value', timedOut)).resolves.toBe('value');
    expect(clock.pendingTimers).toBe(0);
  });

  it('passes the call\'s own rejection through, also one thrown before it returns a promise', async () => {
    const clock = new FakeClock();
    await expect(withTimeout(clock, 1000, async () => Promise.reject(new Error('refused')), timedOut)).rejects.toThrow('refused');
    await expect(withTimeout(clock, 1000, () => {
      throw new Error('thrown');
    }, timedOut)).rejects.toThrow('thrown');
    expect(clock.pendingTimers).toBe(0);
  });

  it('rejects with onTimeout() once timeoutMs passes on the clock, and not a millisecond before', async () => {
    const clock = new FakeClock();
    const call = deferred<string>();
    let outcome: unknown;
    void withTimeout(clock, 1000, () => call.promise, timedOut).then((v) => (outcome = v), (err) => (outcome = err));
    await clock.advance(999);
    expect(outcome).toBeUndefined();
    await clock.advance(1);
    expect(outcome).toBeInstanceOf(Error);
    expect((outcome as Error).message).toBe('timed out');
  });

  it('a call that settles after the timeout changes nothing (no late value, no unhandled rejection)', async () => {
    const clock = new FakeClock();
    const call = deferred<string>();
    // The expectation is attached before the timeout fires, so a rejection is never left unhandled.
    const bounded = expect(withTimeout(clock, 10, () => call.promise, timedOut)).rejects.toThrow('timed out');
    await clock.advance(10);
    call.reject(new Error('too late'));
    await bounded;
  });

  it('builds the timeout error only when the timeout fires', async () => {
    const clock = new FakeClock();
    let built = 0;
    await withTimeout(clock, 10, async () => 1, () => {
      built++;
      return timedOut();
    });
    await clock.advance(100);
    expect(built).toBe(0);
  });
});
