import type { MachineRecord } from '../machine/record.js';

export interface QuarantinedFile {
  file: string;
  movedTo: string;
  reason: string;
}

export interface LoadResult {
  records: number;
  quarantined: QuarantinedFile[];
}

/**
 * Persistent machine records. Writes are atomic and durable before they resolve; a write that
 * fails throws AgentError('StorageFailure') and leaves both memory and disk as they were. Only when
 * undoing a half-done write fails too does it say so in the message, memory then holding what the
 * directory holds (what a restart loads).
 */
export interface MachineStore {
  /** Reads every record from disk; corrupt or foreign files are moved aside, never fatal. */
  load(): Promise<LoadResult>;
  /** The stored record, deep-frozen (shared, never copied): change a cloneRecord() of it. */
  get(name: string): MachineRecord | undefined;
  /** All records, sorted by name, deep-frozen like get(). */
  list(): MachineRecord[];
  /**
   * Writes the record with resourceVersion bumped by one and returns the stored copy.
   */
  put(record: MachineRecord): Promise<MachineRecord>;
  /** Removes the record file (missing counts as done). */
  remove(name: string): Promise<void>;
}
