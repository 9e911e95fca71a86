// What the journal keeps of one event: the sequence orders it, uid and call say who caused it.

export type EventType = 'normal' | 'warning';

/** Who caused an event: a D-Bus caller (its unix uid and the member it called), else the agent. */
export interface Actor {
  uid: number;
  call: string;
}

export interface AgentEvent {
  /** 1, 2, 3, ... in journal order, never reused, also across restarts. */
  sequence: number;
  /** Milliseconds since the epoch. */
  timestamp: number;
  machine: string;
  type: EventType;
  /** CamelCase: ShutdownRequested, ShutdownRetried, ShutdownCompleted, ForceStopped, CleanupFailed, Deleted, ... */
  reason: string;
  message: string;
  /** Absent for the agent's own doing (sweeper, reconciler). */
  actor?: Actor;
}

/** A stored payload back into an event, or undefined when it is not one. */
export function parseStoredEvent(payload: Buffer): AgentEvent | undefined {
  try {
    return toStoredEvent(JSON.parse(payload.toString('utf8')));
  } catch {
    return undefined;
  }
}

/** A parsed value (a payload, or an event the record journal carried) as an event, or undefined. */
export function toStoredEvent(value: unknown): AgentEvent | undefined {
  const e = value as AgentEvent | null;
  if (typeof e !== 'object' || e === null) return undefined;
  const ok = Number.isSafeInteger(e.sequence) && e.sequence > 0 && typeof e.timestamp === 'number' &&
    typeof e.machine === 'string' && (e.type === 'normal' || e.type === 'warning') &&
    typeof e.reason === 'string' && typeof e.message === 'string';
  return ok ? e : undefined;
}
