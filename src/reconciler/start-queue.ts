import type { Clock, TimerHandle } from '../lifecycle/clock.js';

export interface StartQueueOptions {
  clock: Clock;
  /** Starts in flight at once, at every time (config restore.parallelism). */
  parallelism: number;
  /** Between the beginnings of two starts while a restore runs; none outside one (config restore.delaySec). */
  delayMs: number;
  /** Starts one machine; its own failures are handled inside (the reconciler's backoff). */
  start: (name: string) => Promise<void>;
  onError: (name: string, err: unknown) => void;
}

/**
 * Every guest start the reconciler makes goes through here: highest startPriority first, then by
 * name, at most `parallelism` in flight. A restore (the agent starting, an undrain) first collects
 * every machine that is to start, so the order is the priority order and not the order the
 * machines happened to be looked at, and spaces the starts by `delayMs` until it has none left.
 * A start outside a restore (a new machine, power on, a restart after a crash) waits for nothing
 * but a free slot.
 */
export class StartQueue {
  private readonly waiting = new Map<string, number>();
  private readonly inFlight = new Set<string>();
  /** Restores still collecting their machines: nothing starts before they are all in. */
  private readonly collecting = new Set<object>();
  private restoring = false;
  private nextStartAt = 0;
  private timer: TimerHandle | undefined;
  /** The most starts ever in flight at once, for tests and logs. */
  maxInFlight = 0;

  constructor(private readonly o: StartQueueOptions) {
    if (!Number.isInteger(o.parallelism) || o.parallelism < 1) throw new RangeError(`start parallelism must be at least 1, not ${o.parallelism}`);
  }

  /** Waiting or starting. */
  has(name: string): boolean {
    return this.waiting.has(name) || this.inFlight.has(name);
  }

  /** Queues a start (once); returns whether it began at once. */
  request(name: string, priority: number): boolean {
    if (this.has(name)) return this.inFlight.has(name);
    this.waiting.set(name, priority);
    this.pump();
    return this.inFlight.has(name);
  }

  /** A restore begins; call the returned function once every machine it covers was requested. */
  beginRestore(): () => void {
    const token = {};
    this.collecting.add(token);
    this.restoring = true;
    this.nextStartAt = 0;
    return () => {
      if (this.collecting.delete(token)) this.pump();
    };
  }

  /** Forgets the waiting starts (they are asked for again later); those in flight finish. */
  dropWaiting(): void {
    this.waiting.clear();
    this.timer?.cancel();
    this.timer = undefined;
  }

  stop(): void {
    this.dropWaiting();
    this.collecting.clear();
    this.restoring = false;
  }

  private pump(): void {
    if (this.collecting.size > 0) return;
    if (this.waiting.size === 0 && this.inFlight.size === 0) this.restoring = false;
    while (this.inFlight.size < this.o.parallelism && this.waiting.size > 0) {
      const wait = this.restoring ? this.nextStartAt - this.o.clock.now() : 0;
      if (wait > 0) return this.pumpIn(wait);
      const name = this.next();
      this.waiting.delete(name);
      this.inFlight.add(name);
      this.maxInFlight = Math.max(this.maxInFlight, this.inFlight.size);
      if (this.restoring) this.nextStartAt = this.o.clock.now() + this.o.delayMs;
      void Promise.resolve()
        .then(() => this.o.start(name))
        .catch((err) => this.o.onError(name, err))
        .finally(() => {
          this.inFlight.delete(name);
          this.pump();
        });
    }
  }

  private pumpIn(ms: number): void {
    if (this.timer) return;
    this.timer = this.o.clock.setTimer(ms, () => {
      this.timer = undefined;
      this.pump();
    });
  }

  /** Highest priority first; equal priorities by name, so the order is the same at every boot. */
  private next(): string {
    let best: [string, number] | undefined;
    for (const entry of this.waiting) {
      if (!best || entry[1] > best[1] || (entry[1] === best[1] && entry[0] < best[0])) best = entry;
    }
    return best![0];
  }
}
