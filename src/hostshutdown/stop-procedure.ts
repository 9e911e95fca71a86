import type { HostShutdownAction } from '../machine/spec.js';

// The contract of "stop every guest by policy and priority", shared by the three things that do
// it: a host shutdown, a service stop with hostShutdown.onServiceStop "shutdown", and a drain.
// Each run is persisted as a ShutdownRecord (<stateDir>/shutdowns/), readable after a reboot.

export type StopKind = 'host-shutdown' | 'service-stop' | 'drain';

/** What became of one guest: shut down by ACPI, saved to disk, destroyed, failed, or still running. */
export type GuestResult = 'clean' | 'saved' | 'forced' | 'failed' | 'left-running';

/** in-progress: running, or the agent died during it (shown as interrupted once a new agent reads it). */
export type StopRunResult = 'in-progress' | 'completed' | 'cancelled' | 'interrupted';

export interface ShutdownRecordGroup {
  minPriority: number;
  budgetSec: number;
  /** Milliseconds since the epoch; 0 when the group has not begun (or had no guests). */
  startedAt: number;
  finishedAt: number;
}

export interface ShutdownRecordMachine {
  /** The machine record's name; the domain name alone for a marked domain without a record. */
  machine: string;
  domain: string;
  action: HostShutdownAction;
  priority: number;
  /** Index into ShutdownRecord.groups. */
  group: number;
  result: GuestResult | 'pending';
  /** Milliseconds from the start of the run until the result; 0 while pending. */
  afterMs: number;
  /** One line: why a save fell back, how many ACPI requests, what failed. */
  detail: string;
}

export interface ShutdownRecord {
  /** Sortable and unique: the start time and a counter, e.g. "20261205T080102Z-1". */
  id: string;
  kind: StopKind;
  result: StopRunResult;
  startedAt: number;
  finishedAt: number;
  /** hostShutdown.timeoutSec at the start: the bound on the whole run. */
  boundSec: number;
  groups: ShutdownRecordGroup[];
  machines: ShutdownRecordMachine[];
}

export interface StopRunOptions {
  kind: StopKind;
  /** Aborted: stop sending requests, leave the remaining guests running, record "cancelled". */
  signal?: AbortSignal;
}

/** Plans from the current records and domains, persists the record at the start and end, runs the groups. */
export interface StopProcedure {
  run(options: StopRunOptions): Promise<ShutdownRecord>;
}

/** The persisted records, newest last, for D-Bus and vmkeeperctl. */
export interface ShutdownRecordReader {
  list(): readonly ShutdownRecord[];
  get(id: string): ShutdownRecord | undefined;
}
