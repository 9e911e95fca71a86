import type { PlannedGuest } from './stop-plan.js';
import type { GuestResult } from './stop-procedure.js';

// What the coordinator reports while it runs a plan: the stop procedure turns these into the
// record, the events and the progress lines.

export interface GuestOutcome {
  result: GuestResult;
  /** Milliseconds from the start of the run. */
  afterMs: number;
  detail: string;
}

export interface StopProgress {
  /** 1-based index of the group under way, and how many groups the run has. */
  group: number;
  groups: number;
  minPriority: number;
  guestsInGroup: number;
  runningInGroup: number;
  groupDeadlineAt: number;
  runDeadlineAt: number;
  /** Guests whose result is known, over the whole run: grows as guests go off. */
  finished: number;
  total: number;
}

/** What happens during a run, as it happens. */
export interface StopListener {
  groupStarted(index: number, deadlineAt: number): void;
  /** The first ACPI request went out (also after a failed save). */
  shutdownRequested(guest: PlannedGuest): void;
  saveFailed(guest: PlannedGuest, why: string): void;
  finished(guest: PlannedGuest, outcome: GuestOutcome): void;
  /** Awaited before the next group begins (the record is persisted here). */
  groupEnded(index: number): Promise<void>;
  progress(p: StopProgress): void;
}
