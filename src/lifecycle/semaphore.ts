/** Bounds how many async jobs run at once (e.g. libvirt calls on the libuv pool); waiters start in order. */
export class Semaphore {
  private active = 0;
  private waiting: Array<() => void> = [];

  constructor(private readonly limit: number) {
    if (!Number.isInteger(limit) || limit < 1) throw new RangeError(`a semaphore needs a limit of at least 1, not ${limit}`);
  }

  async run<T>(work: () => Promise<T>): Promise<T> {
    if (this.active < this.limit) this.active++;
    // A freed slot is handed to the first waiter directly (release does not decrement), so a
    // caller arriving before that waiter wakes up can neither jump the queue nor exceed the limit.
    else await new Promise<void>((resolve) => this.waiting.push(resolve));
    try {
      return await work();
    } finally {
      this.release();
    }
  }

  private release(): void {
    const next = this.waiting.shift();
    if (next) next();
    else this.active--;
  }
}
