import type { MachineRecord } from '../machine/record.js';

// The decision at the heart of graceful shutdown, as a pure function of the persisted record, the
// domain's state and the time, so every case is a row in a table-driven test.

export type ShutdownStep =
  // First ACPI shutdown. thenForce: the deadline passed before this first step could run (a
  // loaded agent), so the destroy follows right after the press.
  | { kind: 'request'; thenForce: boolean }
  | { kind: 'retry' } // the guest may have missed it (e.g. still booting): press again
  | { kind: 'force' } // the deadline passed: destroy
  | { kind: 'wait'; until: number } // nothing to do before this time
  | { kind: 'finish' }; // the domain is off: complete the power-off or clean up

export function nextShutdownStep(r: MachineRecord, domainActive: boolean, now: number, retryIntervalMs: number): ShutdownStep {
  if (!domainActive) return { kind: 'finish' };
  const { shutdownRequestedAt, lastShutdownSentAt, forceStopAt, gracePeriodSec } = r.status;
  const deadlinePassed = forceStopAt > 0 && now >= forceStopAt;
  // A guest is never destroyed without having been asked first, however late the sweeper gets
  // to it; only a grace of 0 means "destroy now".
  if (shutdownRequestedAt === 0 && (gracePeriodSec > 0 || !deadlinePassed)) return { kind: 'request', thenForce: deadlinePassed };
  if (deadlinePassed) return { kind: 'force' };
  const retryAt = lastShutdownSentAt + retryIntervalMs;
  if (now >= retryAt) return { kind: 'retry' };
  return { kind: 'wait', until: forceStopAt > 0 ? Math.min(retryAt, forceStopAt) : retryAt };
}
