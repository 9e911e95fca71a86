import type { MachineRecord } from '../machine/record.js';

// The decision at the heart of graceful shutdown, as a pure function of the persisted record, the
// domain's state and the time, so every case is a row in a table-driven test.

export type ShutdownStep =
  | { kind: 'request' } // first ACPI shutdown
  | { kind: 'retry' } // the guest may have missed it (e.g. still booting): press again
  | { kind: 'force' } // the deadline passed: destroy
  | { kind: 'wait'; until: number } // nothing to do before this time
  | { kind: 'finish' }; // the domain is off: complete the power-off or clean up

export function nextShutdownStep(r: MachineRecord, domainActive: boolean, now: number, retryIntervalMs: number): ShutdownStep {
  if (!domainActive) return { kind: 'finish' };
  const { shutdownRequestedAt, lastShutdownSentAt, forceStopAt } = r.status;
  if (forceStopAt > 0 && now >= forceStopAt) return { kind: 'force' };
  if (shutdownRequestedAt === 0) return { kind: 'request' };
  const retryAt = lastShutdownSentAt + retryIntervalMs;
  if (now >= retryAt) return { kind: 'retry' };
  return { kind: 'wait', until: forceStopAt > 0 ? Math.min(retryAt, forceStopAt) : retryAt };
}
