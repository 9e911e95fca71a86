import { DBusError } from 'dbus-next';
import type { AgentEvent, AgentSignal, VmkeeperClient } from './model.js';

// Follows the agent's event journal by sequence (docs/dbus-api.md, "Event journal"): list pages
// after the cursor, then take EventRecorded signals; list again when the agent (re)appears or a
// signal skips a sequence. Every event is delivered once, in order.

export interface FollowerHooks {
  deliver(event: AgentEvent): void;
  /** The cursor was compacted away (or is ahead of a new journal): listing restarts from the oldest kept. */
  expired(cursor: number, message: string): void;
}

const EXPIRED = 'org.vmkeeper1.Error.EventsExpired';
const PAGE = 500;

export class EventFollower {
  private chain: Promise<void> = Promise.resolve();

  constructor(
    private readonly client: VmkeeperClient,
    private readonly machine: string | undefined,
    private readonly hooks: FollowerHooks,
    /** The last sequence already seen: delivery starts after it. */
    public cursor = 0,
  ) {}

  /** Lists everything after the cursor. */
  catchUp(): Promise<void> {
    return this.serialised(() => this.list());
  }

  /** Feeds one signal in; work is serialised so a listing and signals never interleave. */
  onSignal(signal: AgentSignal): Promise<void> {
    if (signal.kind === 'agent-back') return this.catchUp();
    if (signal.kind !== 'sequenced-event') return Promise.resolve();
    return this.serialised(async () => {
      const seq = signal.event.sequence ?? 0;
      if (seq <= this.cursor) return; // already delivered by a listing
      if (seq > this.cursor + 1) return this.list(); // a gap: the listing fills it (and includes this one)
      this.cursor = seq;
      if (this.wanted(signal.event)) this.hooks.deliver(signal.event);
    });
  }

  /** Waits for the work queued so far. */
  idle(): Promise<void> {
    return this.chain;
  }

  private wanted(e: AgentEvent): boolean {
    return this.machine === undefined || e.machine === this.machine;
  }

  private serialised(work: () => Promise<void>): Promise<void> {
    this.chain = this.chain.then(work);
    return this.chain;
  }

  private async list(): Promise<void> {
    for (;;) {
      let page;
      try {
        page = await this.client.listEventsSince(this.cursor, this.machine);
      } catch (err) {
        if (!(err instanceof DBusError && err.type === EXPIRED) || this.cursor === 0) throw err;
        this.hooks.expired(this.cursor, err.text);
        this.cursor = 0;
        continue;
      }
      for (const e of page.events) {
        if ((e.sequence ?? 0) <= this.cursor) continue;
        this.cursor = e.sequence!;
        this.hooks.deliver(e);
      }
      this.cursor = Math.max(this.cursor, page.next);
      if (page.events.length < PAGE) return;
    }
  }
}
