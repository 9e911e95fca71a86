import type { Clock } from '../lifecycle/clock.js';
import type { Logger } from '../logging/logger.js';
import type { EventJournal } from '../events/event-journal.js';
import type { Actor, AgentEvent, EventType } from './api.js';

/** The unsequenced ListEvents answers with this many recent events, as before the journal. */
const RECENT_EVENTS = 1000;

/** Machine events: each journaled (sequence, who), logged and handed to the listener. */
export class EventLog {
  constructor(
    private readonly clock: Clock,
    private readonly logger: Logger,
    private readonly onEvent: (event: AgentEvent) => void,
    readonly journal: EventJournal,
  ) {}

  record(machine: string, type: EventType, reason: string, message: string, actor?: Actor): AgentEvent {
    const event = this.journal.append(this.stamp(machine, type, reason, message, actor));
    this.announce(event);
    return event;
  }

  /**
   * The event of a record write about to be made: numbered now, so the write's journal frame can
   * carry it. Then exactly one of confirm() (the write succeeded) or cancel() (it failed).
   */
  reserve(machine: string, type: EventType, reason: string, message: string, actor?: Actor): AgentEvent {
    return this.journal.reserve(this.stamp(machine, type, reason, message, actor));
  }

  /** The reserved event's write is durable and its frame carried the event: so is the event. */
  carried(event: AgentEvent): void {
    this.journal.carry(event);
  }

  /** The reserved event's write succeeded: journal it (unless its frame carried it), log and announce it. */
  confirm(event: AgentEvent): void {
    // MachineEvent before EventRecorded, as for the agent's own events.
    this.announce(event);
    this.journal.release(event);
  }

  /** The reserved event's write failed: it is dropped (unless its frame may be on disk after all). */
  cancel(event: AgentEvent): void {
    this.journal.cancel(event);
  }

  /** Resolves once this event is on disk (ListEventsSince shows it). */
  durable(event: AgentEvent): Promise<void> {
    return this.journal.durable(event);
  }

  private stamp(machine: string, type: EventType, reason: string, message: string, actor?: Actor): Omit<AgentEvent, 'sequence'> {
    return { timestamp: this.clock.now(), machine, type, reason, message, ...(actor ? { actor } : {}) };
  }

  private announce(event: AgentEvent): void {
    const { machine, type, reason, message, actor } = event;
    const log = type === 'warning' ? this.logger.warn : this.logger.info;
    const by = actor ? { uid: actor.uid, call: actor.call } : { by: 'agent' };
    // Host-level events (machine "") are not about one machine: the message alone.
    log.call(this.logger, machine ? `${machine}: ${message}` : message, { machine, reason, sequence: event.sequence, ...by });
    this.onEvent(event);
  }

  /** Resolves once every event recorded so far is on disk. */
  flushed(): Promise<void> {
    return this.journal.flushed();
  }

  list(): AgentEvent[] {
    return this.journal.recent(RECENT_EVENTS);
  }
}
