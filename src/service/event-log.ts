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
    const event = this.journal.append({ timestamp: this.clock.now(), machine, type, reason, message, ...(actor ? { actor } : {}) });
    const log = type === 'warning' ? this.logger.warn : this.logger.info;
    const by = actor ? { uid: actor.uid, call: actor.call } : { by: 'agent' };
    // Host-level events (machine "") are not about one machine: the message alone.
    log.call(this.logger, machine ? `${machine}: ${message}` : message, { machine, reason, sequence: event.sequence, ...by });
    this.onEvent(event);
    return event;
  }

  /** Resolves once every event recorded so far is on disk. */
  flushed(): Promise<void> {
    return this.journal.flushed();
  }

  list(): AgentEvent[] {
    return this.journal.recent(RECENT_EVENTS);
  }
}
