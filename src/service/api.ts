import type { MachineRecord } from '../machine/record.js';

// What the D-Bus edge (and anything else that fronts the agent) may call and observe.

import type { Actor, AgentEvent } from '../events/recorded-event.js';
import type { EventPage } from '../events/event-journal.js';

export type { Actor, AgentEvent, EventType } from '../events/recorded-event.js';
export type { EventPage } from '../events/event-journal.js';

/** Who asks, and the ResourceVersion the change expects (0 or absent = any). */
export interface CallOptions {
  actor?: Actor;
  expectedVersion?: number;
}

export type AgentState = 'starting' | 'running' | 'degraded' | 'stopping' | 'host-shutdown';

export interface ManagerInfo {
  version: string;
  state: AgentState;
  libvirtUri: string;
  libvirtConnected: boolean;
  defaultGracePeriodSec: number;
  sweepIntervalSec: number;
  shutdownRetryIntervalSec: number;
  hostShutdownTimeoutSec: number;
}

export interface MachineApiEvents {
  machineAdded: (record: MachineRecord) => void;
  machineChanged: (record: MachineRecord) => void;
  machineRemoved: (record: MachineRecord) => void;
  event: (event: AgentEvent) => void;
  /** The event is on disk: what the sequenced signal carries. */
  eventJournaled: (event: AgentEvent) => void;
  infoChanged: (info: ManagerInfo) => void;
}

export interface MachineApi {
  /** An identical spec for an existing machine returns it unchanged. */
  create(name: string, specJson: string, options?: CallOptions): Promise<MachineRecord>;
  /** Throws NoSuchMachine. The record is shared and frozen: read it, never change it. */
  get(name: string): MachineRecord;
  /** Sorted by name; shared frozen records, as get() returns. */
  list(): MachineRecord[];
  /** Graceful deletion; graceSec undefined = the machine's own grace. Idempotent. */
  delete(name: string, graceSec?: number, options?: CallOptions): Promise<void>;
  setPower(name: string, power: string, options?: CallOptions): Promise<void>;
  setAnnotations(name: string, annotations: Record<string, string>, options?: CallOptions): Promise<void>;
  /** Recent events, oldest first. */
  events(): AgentEvent[];
  /** Journaled events after the cursor; throws EventsExpired for a cursor compacted away. */
  eventsSince(after: number, machine: string | undefined, limit: number): EventPage;
  info(): ManagerInfo;
  on<E extends keyof MachineApiEvents>(event: E, listener: MachineApiEvents[E]): void;
  off<E extends keyof MachineApiEvents>(event: E, listener: MachineApiEvents[E]): void;
}
