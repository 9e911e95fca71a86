/** Per-key exponential backoff: 1 s, 2 s, 4 s ... up to maxMs, reset on success. */
export class Backoff {
  private failures = new Map<string, number>();

  constructor(private readonly baseMs = 1000, private readonly maxMs = 60_000) {}

  /** Records a failure and returns how long to wait before the next try. */
  fail(key: string): number {
    const n = (this.failures.get(key) ?? 0) + 1;
    this.failures.set(key, n);
    return Math.min(this.maxMs, this.baseMs * 2 ** (n - 1));
  }

  succeed(key: string): void {
    this.failures.delete(key);
  }

  failureCount(key: string): number {
    return this.failures.get(key) ?? 0;
  }
}
