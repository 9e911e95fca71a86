// Polling with a deadline: tests synchronise on observable state, never on bare sleeps.

export interface WaitOptions {
  timeoutMs?: number;
  intervalMs?: number;
  /** Shown in the timeout error. */
  what?: string;
  /** A predicate error for which waiting longer is pointless (e.g. the process died): rethrown at once. */
  rethrow?: (err: unknown) => boolean;
}

/** Resolves with the first truthy value of `predicate`; rejects when the deadline passes. */
export async function waitFor<T>(predicate: () => T | Promise<T>, options: WaitOptions = {}): Promise<NonNullable<T>> {
  const { timeoutMs = 5000, intervalMs = 20, what = 'condition', rethrow } = options;
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    try {
      const value = await predicate();
      if (value) return value as NonNullable<T>;
    } catch (err) {
      if (rethrow?.(err)) throw err;
      lastError = err; // a predicate may throw until the state exists
    }
    if (Date.now() >= deadline) {
      const suffix = lastError ? `: last error: ${lastError instanceof Error ? lastError.message : String(lastError)}` : '';
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${suffix}`);
    }
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}
