import type { Clock } from './clock.js';

/**
 * Settles like call, or rejects with onTimeout() after timeoutMs on the injected clock (the call
 * itself is abandoned, not cancelled). The one timer race every bounded call in the agent uses.
 */
export function withTimeout<T>(clock: Clock, timeoutMs: number, call: () => Promise<T>, onTimeout: () => Error): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    let settled = false;
    const timer = clock.setTimer(timeoutMs, () => {
      if (settled) return;
      settled = true;
      reject(onTimeout());
    });
    const finish = (fn: () => void) => {
      if (settled) return;
      settled = true;
      timer.cancel();
      fn();
    };
    let pending: Promise<T>;
    try {
      pending = call();
    } catch (err) {
      finish(() => reject(err));
      return;
    }
    pending.then(
      (value) => finish(() => resolve(value)),
      (err) => finish(() => reject(err)),
    );
  });
}
