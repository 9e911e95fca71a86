import type { MachineRecord } from '../machine/record.js';

// What the D-Bus edge (and anything else that fronts the agent) may call and observe.

export type EventType = 'normal' | 'warning';

export interface AgentEvent {
  /** Milliseconds since the epoch. */
  timestamp: number;
  machine: string;
  type: EventType;
  /** CamelCase: ShutdownRequested, ShutdownRetried, ShutdownCompleted, ForceStopped, CleanupFailed, Deleted, ... */
  reason: string;
  message: string;
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
  infoChanged: (info: ManagerInfo) => void;
}

export interface MachineApi {
  create(name: string, specJson: string): Promise<MachineRecord>;
  /** Throws NoSuchMachine. */
  get(name: string): MachineRecord;
  /** Sorted by name. */
  list(): MachineRecord[];
  /** Graceful deletion; graceSec undefined = the machine's own grace. Idempotent. */
  delete(name: string, graceSec?: number): Promise<void>;
  setPower(name: string, power: string): Promise<void>;
  setAnnotations(name: string, annotations: Record<string, string>): Promise<void>;
  /** Recent events, oldest first. */
  events(): AgentEvent[];
  info(): ManagerInfo;
  on<E extends keyof MachineApiEvents>(event: E, listener: MachineApiEvents[E]): void;
  off<E extends keyof MachineApiEvents>(event: E, listener: MachineApiEvents[E]): void;
}
