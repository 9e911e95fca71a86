import { describe, expect, it } from 'vitest';
import { Backoff } from '../../../src/lifecycle/backoff.js';

describe('Backoff', () => {
  it('doubles from the base up to the cap, per key', () => {
    const b = new Backoff(1000, 5000);
    expect([1, 2, 3, 4, 5].map(() => b.fail('a'))).toEqual([1000, 2000, 4000, 5000, 5000]);
    expect(b.fail('other')).toBe(1000);
    expect(b.failureCount('a')).toBe(5);
  });

  it('success resets the key to the base delay', () => {
    const b = new Backoff(1000, 60_000);
    b.fail('a');
    b.fail('a');
    b.succeed('a');
    expect(b.failureCount('a')).toBe(0);
    expect(b.fail('a')).toBe(1000);
  });

  it('stays at the cap after very many failures (no overflow to Infinity or NaN)', () => {
    const b = new Backoff(1000, 60_000);
    let last = 0;
    for (let i = 0; i < 5000; i++) last = b.fail('k');
    expect(last).toBe(60_000);
  });

  it('defaults to 1 s doubling up to 60 s', () => {
    const b = new Backoff();
    const delays = Array.from({ length: 8 }, () => b.fail('k'));
    expect(delays).toEqual([1000, 2000, 4000, 8000, 16_000, 32_000, 60_000, 60_000]);
  });
});
