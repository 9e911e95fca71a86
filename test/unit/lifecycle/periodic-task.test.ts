import { describe, expect, it } from 'vitest';
import { FakeClock, flushMicrotasks } from '../../support/fakes/fake-clock.js';
import { PeriodicTask } from '../../../src/lifecycle/timers.js';
import { deferred } from '../../support/deferred.js';

const INTERVAL = 1000;

/** A PeriodicTask on a fake clock whose job counts its runs and may be held open by the test. */
function counted(job: (run: number) => Promise<unknown> = async () => undefined) {
  const clock = new FakeClock();
  const errors: unknown[] = [];
  let runs = 0;
  const task = new PeriodicTask(clock, INTERVAL, () => job(++runs), (err) => errors.push(err));
  return { clock, task, errors, runs: () => runs };
}

describe('PeriodicTask', () => {
  it('runs once per interval after start, and not before', async () => {
    const t = counted();
    t.task.start();
    await t.clock.advance(INTERVAL - 1);
    expect(t.runs()).toBe(0);
    await t.clock.advance(1);
    expect(t.runs()).toBe(1);
    await t.clock.advance(4 * INTERVAL);
    expect(t.runs()).toBe(5);
  });

  it('start called twice keeps a single loop', async () => {
    const t = counted();
    t.task.start();
    t.task.start();
    await t.clock.advance(3 * INTERVAL);
    expect(t.runs()).toBe(3);
    expect(t.clock.pendingTimers).toBe(1);
  });

  it('stop ends the loop; start after stop resumes a single loop', async () => {
    const t = counted();
    t.task.start();
    await t.clock.advance(2 * INTERVAL);
    t.task.stop();
    await t.clock.advance(5 * INTERVAL);
    expect(t.runs()).toBe(2);
    expect(t.clock.pendingTimers).toBe(0);
    t.task.start();
    await t.clock.advance(3 * INTERVAL);
    expect(t.runs()).toBe(5);
    expect(t.clock.pendingTimers).toBe(1);
  });

  it('stop and start while a run is in flight still leave one loop', async () => {
    const held = deferred();
    const t = counted((run) => (run === 1 ? held.promise : Promise.resolve()));
    t.task.start();
    await t.clock.advance(INTERVAL);
    expect(t.runs()).toBe(1);
    t.task.stop();
    t.task.start();
    held.resolve();
    await flushMicrotasks();
    await t.clock.advance(3 * INTERVAL);
    expect(t.runs()).toBe(4);
    expect(t.clock.pendingTimers).toBe(1);
  });

  it('never runs two jobs at once: the next interval is timed from the end of a slow run', async () => {
    const held = deferred();
    const t = counted((run) => (run === 1 ? held.promise : Promise.resolve()));
    t.task.start();
    await t.clock.advance(INTERVAL);
    await t.clock.advance(10 * INTERVAL);
    expect(t.runs()).toBe(1);
    held.resolve();
    await flushMicrotasks();
    await t.clock.advance(INTERVAL - 1);
    expect(t.runs()).toBe(1);
    await t.clock.advance(1);
    expect(t.runs()).toBe(2);
  });

  it('a job that fails, even by throwing before it returns a promise, is reported and the loop goes on', async () => {
    const t = counted((run) => {
      if (run === 1) return Promise.reject(new Error('rejected'));
      if (run === 2) throw new Error('thrown');
      return Promise.resolve();
    });
    t.task.start();
    await t.clock.advance(3 * INTERVAL);
    expect(t.runs()).toBe(3);
    expect(t.errors.map((e) => (e as Error).message)).toEqual(['rejected', 'thrown']);
  });

  it('stop during a run schedules nothing after it', async () => {
    const held = deferred();
    const t = counted(() => held.promise);
    t.task.start();
    await t.clock.advance(INTERVAL);
    t.task.stop();
    held.resolve();
    await flushMicrotasks();
    expect(t.clock.pendingTimers).toBe(0);
    await t.clock.advance(5 * INTERVAL);
    expect(t.runs()).toBe(1);
  });
});
