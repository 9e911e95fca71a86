import { cloneRecord, type MachineRecord } from '../machine/record.js';
import { sameJson } from '../machine/same-json.js';
import type { MachineStore } from '../store/port.js';
import { KeyedLock } from '../lifecycle/keyed-lock.js';
import { TypedEmitter } from '../lifecycle/emitter.js';
import type { EventLog } from './event-log.js';
import type { Actor, AgentEvent, EventType, MachineApiEvents } from './api.js';

/** The event a record change causes, told from the record about to be stored. */
export interface ChangeEvent {
  type: EventType;
  reason: string;
  message: string;
  actor?: Actor;
}

/**
 * The one way records change. Read-modify-write runs under a per-machine lock so the API, the
 * reconciler and the sweeper never lose each other's updates; every change is announced.
 */
export class MachineRecords {
  private readonly writes = new KeyedLock();

  constructor(
    private readonly store: MachineStore,
    private readonly events: EventLog,
    readonly emitter: TypedEmitter<MachineApiEvents>,
  ) {}

  get(name: string): MachineRecord | undefined {
    return this.store.get(name);
  }

  list(): MachineRecord[] {
    return this.store.list();
  }

  /**
   * Stores a new record, or, when the name is taken, returns what `exists` says (or throws). With
   * `event`, a new record's event is durable with it (one sync where the store has a journal).
   */
  async create(
    name: string,
    build: () => MachineRecord,
    exists: (current: MachineRecord) => MachineRecord,
    event?: (created: MachineRecord) => ChangeEvent,
  ): Promise<{ record: MachineRecord; created: boolean }> {
    let caused: AgentEvent | undefined;
    const result = await this.writes.run(name, async () => {
      const current = this.store.get(name);
      if (current) return { record: exists(current), created: false };
      const next = build();
      const { stored, reserved } = await this.putWithEvent(next, event?.(next));
      this.emitter.emit('machineAdded', stored);
      caused = this.confirm(reserved);
      return { record: stored, created: true };
    });
    if (caused) await this.events.durable(caused);
    return result;
  }

  /**
   * Applies mutate to a copy of the latest record and stores it if anything changed. mutate may
   * throw (the record stays as it was). Resolves undefined when the record is gone. With `event`,
   * a change's event (if it gives one) is durable when this resolves, carried by the record's own
   * sync where the store has a journal.
   */
  async update(name: string, mutate: (record: MachineRecord) => void, event?: (next: MachineRecord) => ChangeEvent | undefined): Promise<MachineRecord | undefined> {
    let caused: AgentEvent | undefined;
    const result = await this.writes.run(name, async () => {
      const current = this.store.get(name);
      if (!current) return undefined;
      const next = cloneRecord(current);
      mutate(next);
      next.resourceVersion = current.resourceVersion;
      if (sameJson(next, current)) return current;
      const { stored, reserved } = await this.putWithEvent(next, event?.(next));
      this.emitter.emit('machineChanged', stored);
      caused = this.confirm(reserved);
      return stored;
    });
    // Waited for outside the lock: the next write to this machine need not wait for it.
    if (caused) await this.events.durable(caused);
    return result;
  }

  remove(name: string): Promise<void> {
    return this.writes.run(name, async () => {
      const current = this.store.get(name);
      if (!current) return;
      await this.store.remove(name);
      this.emitter.emit('machineRemoved', current);
    });
  }

  event(machine: string, type: EventType, reason: string, message: string, actor?: Actor): AgentEvent {
    return this.events.record(machine, type, reason, message, actor);
  }

  /** The write, its event numbered first so the store's frame can carry it; a failed write cancels it. */
  private async putWithEvent(next: MachineRecord, change: ChangeEvent | undefined): Promise<{ stored: MachineRecord; reserved?: AgentEvent }> {
    if (!change) return { stored: await this.store.put(next) };
    const reserved = this.events.reserve(next.name, change.type, change.reason, change.message, change.actor);
    try {
      return { stored: await this.store.put(next, { entry: reserved, carried: () => this.events.carried(reserved) }), reserved };
    } catch (err) {
      this.events.cancel(reserved);
      throw err;
    }
  }

  private confirm(reserved: AgentEvent | undefined): AgentEvent | undefined {
    if (reserved) this.events.confirm(reserved);
    return reserved;
  }
}
