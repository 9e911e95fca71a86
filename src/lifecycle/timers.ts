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

/** Runs an async job every intervalMs, never two at once; the next run is timed from the end of the last. */
export class PeriodicTask {
  private timer: TimerHandle | undefined;
  private running = false;

  constructor(
    private readonly clock: Clock,
    private readonly intervalMs: number,
    private readonly job: () => Promise<unknown>,
    private readonly onError: (err: unknown) => void,
  ) {}

  start(): void {
    this.running = true;
    this.schedule();
  }

  stop(): void {
    this.running = false;
    this.timer?.cancel();
  }

  private schedule(): void {
    this.timer = this.clock.setTimer(this.intervalMs, () => {
      if (!this.running) return;
      void this.job()
        .catch(this.onError)
        .finally(() => this.running && this.schedule());
    });
  }
}
