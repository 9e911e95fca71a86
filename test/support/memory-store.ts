import { AgentError } from '../../src/machine/errors.js';
import { cloneRecord, freezeRecord, type MachineRecord } from '../../src/machine/record.js';
import type { LoadResult, MachineStore } from '../../src/store/port.js';

/** An in-memory MachineStore for unit tests; like the file store it hands out frozen records. */
export class MemoryStore implements MachineStore {
  readonly records = new Map<string, MachineRecord>();
  writes = 0;
  private failures = 0;

  constructor(initial: MachineRecord[] = []) {
    for (const r of initial) this.records.set(r.name, freezeRecord(cloneRecord(r)));
  }

  failNextWrites(count = 1): void {
    this.failures = count;
  }

  async load(): Promise<LoadResult> {
    return { records: this.records.size, quarantined: [] };
  }

  get(name: string): MachineRecord | undefined {
    return this.records.get(name);
  }

  list(): MachineRecord[] {
    return [...this.records.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  async put(record: MachineRecord): Promise<MachineRecord> {
    if (this.failures > 0) {
      this.failures--;
      throw new AgentError('StorageFailure', `cannot write ${record.name}.json: ENOSPC: no space left on device`);
    }
    const stored = cloneRecord(record);
    stored.resourceVersion = (this.records.get(record.name)?.resourceVersion ?? 0) + 1;
    this.records.set(record.name, freezeRecord(stored));
    this.writes++;
    return stored;
  }

  async remove(name: string): Promise<void> {
    this.records.delete(name);
  }
}
