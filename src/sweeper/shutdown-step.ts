import { decideShutdownStep, type ShutdownStep } from '../domains/shutdown-policy.js';
import type { MachineRecord } from '../machine/record.js';

// The shared shutdown policy, read from the persisted record, so a restart of the agent resumes
// where the last step left off. The record writes 0 for "not yet" and "no deadline".

export function nextShutdownStep(r: MachineRecord, domainActive: boolean, now: number, retryIntervalMs: number): ShutdownStep {
  const { shutdownRequestedAt, lastShutdownSentAt, forceStopAt, gracePeriodSec } = r.status;
  const progress = {
    asked: shutdownRequestedAt !== 0,
    lastSentAt: lastShutdownSentAt,
    forceStopAt: forceStopAt > 0 ? forceStopAt : undefined,
    destroyUnasked: !(gracePeriodSec > 0),
  };
  return decideShutdownStep(progress, domainActive, now, retryIntervalMs);
}
