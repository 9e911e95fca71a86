/** Runs async work one at a time per key; different keys run concurrently. */
export class KeyedLock {
  private tails = new Map<string, Promise<unknown>>();
  private idleWaiters: Array<() => void> = [];

  run<T>(key: string, work: () => Promise<T>): Promise<T> {
    const previous = this.tails.get(key) ?? Promise.resolve();
    const result = previous.then(work, work);
    const tail = result.catch(() => undefined);
    this.tails.set(key, tail);
    void tail.then(() => {
      if (this.tails.get(key) !== tail) return;
      this.tails.delete(key);
      if (this.tails.size === 0) this.idleWaiters.splice(0).forEach((resolve) => resolve());
    });
    return result;
  }

  isBusy(key: string): boolean {
    return this.tails.has(key);
  }

  /** The keys with work running or queued, for a stop that tells what it is waiting for. */
  busyKeys(): string[] {
    return [...this.tails.keys()];
  }

  /** Resolves once no key has work running or queued (at once when none has). */
  whenIdle(): Promise<void> {
    if (this.tails.size === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }
}
