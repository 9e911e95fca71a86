import { cloneRecord, type MachineRecord } from '../machine/record.js';
import type { MachineStore } from '../store/port.js';
import { KeyedLock } from '../lifecycle/keyed-lock.js';
import { TypedEmitter } from '../lifecycle/emitter.js';
import type { EventLog } from './event-log.js';
import type { Actor, AgentEvent, EventType, MachineApiEvents } from './api.js';

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

  /** Stores a new record, or, when the name is taken, returns what `exists` says (or throws). */
  create(name: string, build: () => MachineRecord, exists: (current: MachineRecord) => MachineRecord): Promise<{ record: MachineRecord; created: boolean }> {
    return this.writes.run(name, async () => {
      const current = this.store.get(name);
      if (current) return { record: exists(current), created: false };
      const stored = await this.store.put(build());
      this.emitter.emit('machineAdded', stored);
      return { record: stored, created: true };
    });
  }

  /**
   * Applies mutate to a copy of the latest record and stores it if anything changed. mutate may
   * throw (the record stays as it was). Resolves undefined when the record is gone.
   */
  update(name: string, mutate: (record: MachineRecord) => void): Promise<MachineRecord | undefined> {
    return this.writes.run(name, async () => {
      const current = this.store.get(name);
      if (!current) return undefined;
      const next = cloneRecord(current);
      mutate(next);
      next.resourceVersion = current.resourceVersion;
      if (JSON.stringify(next) === JSON.stringify(current)) return current;
      const stored = await this.store.put(next);
      this.emitter.emit('machineChanged', stored);
      return stored;
    });
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
}
