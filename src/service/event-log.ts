import type { Clock } from '../lifecycle/clock.js';
import type { Logger } from '../logging/logger.js';
import type { AgentEvent, EventType } from './api.js';

/** Recent machine events in a bounded ring, each also logged and handed to the listener. */
export class EventLog {
  private events: AgentEvent[] = [];

  constructor(
    private readonly clock: Clock,
    private readonly logger: Logger,
    private readonly onEvent: (event: AgentEvent) => void,
    private readonly capacity = 1000,
  ) {}

  record(machine: string, type: EventType, reason: string, message: string): AgentEvent {
    const event: AgentEvent = { timestamp: this.clock.now(), machine, type, reason, message };
    this.events.push(event);
    if (this.events.length > this.capacity) this.events.splice(0, this.events.length - this.capacity);
    const log = type === 'warning' ? this.logger.warn : this.logger.info;
    log.call(this.logger, `${machine}: ${message}`, { machine, reason });
    this.onEvent(event);
    return event;
  }

  list(): AgentEvent[] {
    return this.events.slice();
  }

  forMachine(machine: string): AgentEvent[] {
    return this.events.filter((e) => e.machine === machine);
  }
}
