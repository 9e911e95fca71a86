import { describe, expect, it } from 'vitest';
import { FakeClock } from '../../support/fakes/fake-clock.js';
import { KeyedTimers } from '../../../src/lifecycle/timers.js';

function timers() {
  const clock = new FakeClock();
  const fired: string[] = [];
  const t = new KeyedTimers(clock);
  const set = (key: string, ms: number, label = key) => t.set(key, ms, () => fired.push(label));
  return { clock, t, fired, set };
}

describe('KeyedTimers', () => {
  it('fires each key once at its delay', async () => {
    const x = timers();
    x.set('a', 1000);
    x.set('b', 500);
    await x.clock.advance(499);
    expect(x.fired).toEqual([]);
    await x.clock.advance(1);
    expect(x.fired).toEqual(['b']);
    await x.clock.advance(10_000);
    expect(x.fired).toEqual(['b', 'a']);
    expect(x.clock.pendingTimers).toBe(0);
  });

  it('setting a key again replaces its timer', async () => {
    const x = timers();
    x.set('a', 1000, 'old');
    x.set('a', 3000, 'new');
    expect(x.clock.pendingTimers).toBe(1);
    await x.clock.advance(2000);
    expect(x.fired).toEqual([]);
    await x.clock.advance(1000);
    expect(x.fired).toEqual(['new']);
  });

  it('a negative delay fires at once', async () => {
    const x = timers();
    x.set('late', -5000);
    await x.clock.advance(0);
    expect(x.fired).toEqual(['late']);
  });

  it('cancel stops one key, cancelAll stops every key', async () => {
    const x = timers();
    x.set('a', 100);
    x.set('b', 100);
    x.set('c', 100);
    x.t.cancel('a');
    x.t.cancel('never set');
    await x.clock.advance(100);
    expect(x.fired).toEqual(['b', 'c']);
    x.set('a', 100);
    x.set('b', 100);
    x.t.cancelAll();
    await x.clock.advance(1000);
    expect(x.fired).toEqual(['b', 'c']);
    expect(x.clock.pendingTimers).toBe(0);
  });

  it('a callback may set its own key again (a retry loop)', async () => {
    const x = timers();
    let runs = 0;
    const again = () => {
      runs++;
      if (runs < 3) x.t.set('loop', 100, again);
    };
    x.t.set('loop', 100, again);
    await x.clock.advance(1000);
    expect(runs).toBe(3);
    expect(x.clock.pendingTimers).toBe(0);
  });
});
