import type { Clock } from '../../lifecycle/clock.js';
import { withTimeout } from '../../lifecycle/with-timeout.js';
import { AgentError } from '../../machine/errors.js';

// A hung libvirtd never answers: every native call races a timer on the injected clock, so a
// caller always gets an answer and tests can step time instead of sleeping.

export class CallTimeoutError extends AgentError {
  constructor(readonly op: string, readonly timeoutMs: number) {
    super('HypervisorUnavailable', `libvirt call ${op} timed out after ${timeoutMs} ms`);
  }
}

/** Settles like call, or rejects with CallTimeoutError after timeoutMs (the call itself is abandoned). */
export function withCallTimeout<T>(clock: Clock, timeoutMs: number, op: string, call: () => Promise<T>): Promise<T> {
  return withTimeout(clock, timeoutMs, call, () => new CallTimeoutError(op, timeoutMs));
}
