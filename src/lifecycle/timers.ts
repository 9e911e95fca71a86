import type { Clock, TimerHandle } from './clock.js';

/** At most one pending timer per key: setting a key again replaces its timer. */
export class KeyedTimers {
  private readonly timers = new Map<string, TimerHandle>();

  constructor(private readonly clock: Clock) {}

  set(key: string, delayMs: number, fn: () => void): void {
    this.cancel(key);
    this.timers.set(key, this.clock.setTimer(Math.max(0, delayMs), () => {
      this.timers.delete(key);
      fn();
    }));
  }

  cancel(key: string): void {
    this.timers.get(key)?.cancel();
    this.timers.delete(key);
  }

  cancelAll(): void {
    for (const t of this.timers.values()) t.cancel();
    this.timers.clear();
  }
}

/**
 * Runs an async job every intervalMs, never two at once; the next run is timed from the end of the
 * last. start and stop may be called in any order and any number of times: there is never more
 * than one loop, even when start follows a stop while a run is still in flight.
 */
export class PeriodicTask {
  private timer: TimerHandle | undefined;
  private running = false;
  private inFlight = false;

  constructor(
    private readonly clock: Clock,
    private readonly intervalMs: number,
    private readonly job: () => Promise<unknown>,
    private readonly onError: (err: unknown) => void,
  ) {}

  start(): void {
    if (this.running) return;
    this.running = true;
    // A run still in flight from before a stop schedules the next one when it ends.
    if (!this.inFlight) this.schedule();
  }

  stop(): void {
    this.running = false;
    this.timer?.cancel();
    this.timer = undefined;
  }

  private schedule(): void {
    this.timer?.cancel();
    this.timer = this.clock.setTimer(this.intervalMs, () => {
      this.timer = undefined;
      if (!this.running) return;
      this.inFlight = true;
      // new Promise: a job that throws before returning its promise must not end the loop.
      void new Promise<unknown>((resolve) => resolve(this.job()))
        .catch(this.onError)
        .finally(() => {
          this.inFlight = false;
          if (this.running) this.schedule();
        });
    });
  }
}
