import type { StopRunProgress } from './policy-stop-procedure.js';

// What systemd is told while a stop run goes on: a STATUS= line per group, and EXTEND_TIMEOUT_USEC
// only while the run makes progress, so a wedged run is not kept alive by its own reports.

const LABEL = { 'host-shutdown': 'host shutdown', 'service-stop': 'service stop', drain: 'drain' } as const;

/** e.g. "host shutdown: group 2/3 (priority >= 100): 1 of 3 guests still running, 12 s left". */
export function stopStatusLine(p: StopRunProgress, now: number): string {
  const left = Math.max(0, Math.ceil((p.groupDeadlineAt - now) / 1000));
  return `${LABEL[p.kind]}: group ${p.group}/${p.groups} (priority >= ${p.minPriority}): ${p.runningInGroup} of ${p.guestsInGroup} guests still running, ${left} s left`;
}

/**
 * Decides each EXTEND_TIMEOUT_USEC. One is sent only when a group began or a guest went off since
 * the last one; it reaches the current group's budget end plus one destroy allowance, and never
 * past the run's bound plus that allowance. A drain runs outside any stop job: never extended.
 */
export class TimeoutExtension {
  private last: { group: number; finished: number } | undefined;

  constructor(private readonly allowanceMs: number) {}

  /** Milliseconds to extend by now, or undefined: no extension this time. */
  next(p: StopRunProgress, now: number): number | undefined {
    if (p.kind === 'drain') return undefined;
    const progressed = !this.last || p.group > this.last.group || p.finished > this.last.finished;
    if (!progressed) return undefined;
    this.last = { group: p.group, finished: p.finished };
    const until = Math.min(p.groupDeadlineAt, p.runDeadlineAt) + this.allowanceMs;
    return Math.max(0, until - now);
  }
}
