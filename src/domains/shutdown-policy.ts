// Graceful shutdown of one guest as a pure decision: ask (ACPI power button), ask again every
// retry interval (a booting guest misses the first press), destroy at the deadline. The sweeper
// feeds it a machine record, the host-shutdown coordinator its own run, so both follow one policy
// and every case is a row in a table-driven test.

export type ShutdownStep =
  // First ACPI shutdown. thenForce: the deadline passed before this first step could run (a
  // loaded agent), so the destroy follows right after the press.
  | { kind: 'request'; thenForce: boolean }
  | { kind: 'retry' } // the guest may have missed it (e.g. still booting): press again
  | { kind: 'force' } // the deadline passed: destroy
  | { kind: 'wait'; until: number } // nothing to do before this time
  | { kind: 'finish' }; // the domain is off: complete the power-off or clean up

export interface ShutdownProgress {
  /** Whether the guest has been asked at least once. */
  asked: boolean;
  /** When the last ACPI request went out; read once asked. */
  lastSentAt: number;
  /** When the guest is destroyed; undefined: no deadline. */
  forceStopAt: number | undefined;
  /** A passed deadline may destroy a guest never asked: only a grace of 0 means "destroy now". */
  destroyUnasked: boolean;
}

export function decideShutdownStep(p: ShutdownProgress, domainActive: boolean, now: number, retryIntervalMs: number): ShutdownStep {
  if (!domainActive) return { kind: 'finish' };
  const deadlinePassed = p.forceStopAt !== undefined && now >= p.forceStopAt;
  // A guest is never destroyed without having been asked first, however late the step runs.
  if (!p.asked && !(p.destroyUnasked && deadlinePassed)) return { kind: 'request', thenForce: deadlinePassed };
  if (deadlinePassed) return { kind: 'force' };
  const retryAt = p.lastSentAt + retryIntervalMs;
  if (now >= retryAt) return { kind: 'retry' };
  return { kind: 'wait', until: p.forceStopAt !== undefined ? Math.min(retryAt, p.forceStopAt) : retryAt };
}
