import type { MachineRecord } from '../machine/record.js';

export interface QuarantinedFile {
  file: string;
  movedTo: string;
  reason: string;
}

export interface LoadResult {
  records: number;
  quarantined: QuarantinedFile[];
  /** Of the records, how many came from a snapshot (their files unchanged since it was written). */
  fromSnapshot?: number;
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
   * Writes the record with resourceVersion bumped by one and returns the stored copy. A store with
   * a write-ahead journal puts the attachment in the same frame and calls its carried() once that
   * frame is durable (before it resolves), or when a failed write may have left it on disk (its
   * undo failed too); others ignore it.
   */
  put(record: MachineRecord, attachment?: Attachment): Promise<MachineRecord>;
  /** Removes the record file (missing counts as done). */
  remove(name: string): Promise<void>;
  /**
   * At the agent's stop, after the last write: brings its files up to date and releases them; the
   * store is not used after. A store with nothing to release has none.
   */
  close?(): Promise<void>;
  /** A store that can carry attachments keeps the owner's on load and before emptying its journal. */
  carryAttachmentsOf?(owner: AttachmentOwner): void;
}

/** Another part's entry (an event) made durable by the sync of the record change it belongs to. */
export interface Attachment {
  /** JSON-serialisable; given back to the owner's recover() after a crash. */
  entry: unknown;
  carried(): void;
}

/** Who attaches entries: the store gives them back on load and asks before it forgets them. */
export interface AttachmentOwner {
  /** On load, before anything empties the journal: the entries its frames still hold. */
  recover(entries: unknown[]): void;
  /** Before the journal is emptied: resolves once every entry carried so far is durable elsewhere. */
  secure(): Promise<void>;
}
