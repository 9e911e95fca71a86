import type { Clock, TimerHandle } from '../../../src/lifecycle/clock.js';

interface PendingTimer {
  at: number;
  seq: number;
  fn: () => void;
}

/** A clock that only moves when a test says so; timers fire in deadline order. */
export class FakeClock implements Clock {
  private current: number;
  private timers: PendingTimer[] = [];
  private seq = 0;

  constructor(startMs = Date.UTC(2026, 0, 1)) {
    this.current = startMs;
  }

  now(): number {
    return this.current;
  }

  setTimer(ms: number, fn: () => void): TimerHandle {
    const timer: PendingTimer = { at: this.current + Math.max(0, ms), seq: this.seq++, fn };
    this.timers.push(timer);
    return { cancel: () => (this.timers = this.timers.filter((t) => t !== timer)) };
  }

  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve, reject) => {
      if (signal?.aborted) return reject(signal.reason);
      const onAbort = () => {
        handle.cancel();
        reject(signal!.reason);
      };
      // Like the system clock: the listener goes when the sleep ends, so a reused signal never piles them up.
      const handle = this.setTimer(ms, () => {
        signal?.removeEventListener('abort', onAbort);
        resolve();
      });
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  get pendingTimers(): number {
    return this.timers.length;
  }

  /** Moves time forward by ms, firing due timers in order and letting promises settle between them. */
  async advance(ms: number): Promise<void> {
    const target = this.current + ms;
    for (;;) {
      await flushMicrotasks();
      const due = this.timers.filter((t) => t.at <= target).sort((a, b) => a.at - b.at || a.seq - b.seq)[0];
      if (!due) break;
      this.timers = this.timers.filter((t) => t !== due);
      this.current = Math.max(this.current, due.at);
      due.fn();
    }
    this.current = target;
    await flushMicrotasks();
  }
}

/** Lets chained promise callbacks (and fs callbacks already queued) run. */
export async function flushMicrotasks(rounds = 20): Promise<void> {
  for (let i = 0; i < rounds; i++) await new Promise<void>((r) => setImmediate(r));
}
