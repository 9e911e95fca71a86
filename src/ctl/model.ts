// What the CLI knows about the agent, in plain values (times in ms since the epoch, 0 = not set).
import type { ManagerInfo as AgentManagerInfo } from '../service/api.js';

export interface MachineInfo {
  name: string;
  path: string;
  uuid: string;
  domainName: string;
  state: string;
  power: string;
  createdAt: number;
  deletionTimestamp: number;
  shutdownRequestedAt: number;
  forceStopAt: number;
  gracePeriodSec: number;
  annotations: Record<string, string>;
  spec: string;
  resourceVersion: number;
}

// AgentEvent and ManagerInfo mirror src/service/api.ts, but with `type` and `state` as plain strings
// on purpose: they are decoded off the wire, and an agent of another version may send values this
// CLI does not know (it shows them as they are).
export interface AgentEvent {
  timestamp: number;
  machine: string;
  type: string;
  reason: string;
  message: string;
  /** From ListEventsSince and EventRecorded; absent from the unsequenced ListEvents. */
  sequence?: number;
  /** The caller's unix uid as text, "" for the agent's own doing. */
  uid?: string;
  /** The D-Bus member the caller called, "" for the agent's own doing. */
  call?: string;
}

export interface EventPage {
  events: AgentEvent[];
  next: number;
}

/** The agent's own ManagerInfo as read off the bus: its state may be one this client does not know. */
export type ManagerInfo = Omit<AgentManagerInfo, 'state'> & {
  state: string;
  /** none | draining | drained; "" from an agent without drain. */
  drainState: string;
};

/** One row of ListShutdownRecords (times in ms, 0 = not yet). */
export interface ShutdownRecordSummary {
  id: string;
  kind: string;
  result: string;
  startedAt: number;
  finishedAt: number;
}

/** DescribeShutdownRecord's JSON, as far as the CLI shows it (docs/dbus-api.md, "Shutdown records"). */
export interface ShutdownRecordView extends ShutdownRecordSummary {
  boundSec?: number;
  groups?: Array<{ minPriority?: number; budgetSec?: number; startedAt?: number; finishedAt?: number }>;
  machines?: Array<{ machine?: string; domain?: string; action?: string; priority?: number; group?: number; result?: string; afterMs?: number; detail?: string }>;
}

/** Signals the CLI follows, already decoded. */
export type AgentSignal =
  | { kind: 'event'; event: AgentEvent }
  /** EventRecorded: an event with its sequence, sent once it is on disk. */
  | { kind: 'sequenced-event'; event: AgentEvent }
  /** org.vmkeeper1 has an owner again: the agent (re)started. */
  | { kind: 'agent-back' }
  | { kind: 'machine-new'; name: string; path: string }
  | { kind: 'machine-removed'; name: string; path: string }
  | { kind: 'machine-changed'; path: string; changed: Partial<MachineInfo> }
  /** org.vmkeeper1 lost its owner: the agent exited. */
  | { kind: 'agent-gone' }
  /** Our own bus connection broke. */
  | { kind: 'disconnected'; reason: string };

export interface Subscription {
  close(): void;
}

/** The agent's D-Bus API as the commands use it; the real one is DBusClient, tests pass a fake. */
export interface VmkeeperClient {
  /** Every machine with all its properties, sorted by name. */
  listMachines(): Promise<MachineInfo[]>;
  /** GetMachine + the machine's properties. */
  machine(name: string): Promise<MachineInfo>;
  /** DescribeMachine: the record as JSON text. */
  describeMachine(name: string): Promise<string>;
  createMachine(name: string, specJson: string): Promise<string>;
  /** graceSec undefined = DeleteMachine (the machine's own grace). */
  deleteMachine(name: string, graceSec?: number): Promise<void>;
  setMachinePower(name: string, power: 'on' | 'off'): Promise<void>;
  setMachineAnnotations(name: string, annotations: Record<string, string>): Promise<void>;
  /** Rejects with org.vmkeeper1.Error.Conflict unless the machine is at ResourceVersion `expected`. */
  setMachineAnnotationsIfVersion(name: string, annotations: Record<string, string>, expected: number): Promise<void>;
  listEvents(): Promise<AgentEvent[]>;
  /** One page of journaled events after the cursor; machine undefined = all. */
  listEventsSince(after: number, machine?: string): Promise<EventPage>;
  managerInfo(): Promise<ManagerInfo>;
  /** Drain: returns once the drain is persisted (idempotent). */
  drain(): Promise<void>;
  /** Undrain: cancels a drain under way or ends a drained state (idempotent). */
  undrain(): Promise<void>;
  /** Oldest first. */
  listShutdownRecords(): Promise<ShutdownRecordSummary[]>;
  /** The record as JSON text; NoSuchShutdownRecord for an unknown id. */
  describeShutdownRecord(id: string): Promise<string>;
  /** Starts delivering signals; resolves once the bus has the match rules (so nothing is missed). */
  subscribe(listener: (signal: AgentSignal) => void): Promise<Subscription>;
  close(): void;
}
