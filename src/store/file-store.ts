import { randomBytes } from 'node:crypto';
import { type Clock, type TimerHandle, systemClock } from '../lifecycle/clock.js';
import path from 'node:path';
import { AgentError, describeError } from '../machine/errors.js';
import { sortedIndexOf, validateMachineName } from '../machine/names.js';
import { type MachineRecord, RECORD_API_VERSION, cloneRecord, freezeRecord } from '../machine/record.js';
import { DEFAULT_SPEC_LIMITS } from '../machine/spec.js';
import type { Logger } from '../logging/logger.js';
import type { Attachment, AttachmentOwner, LoadResult, MachineStore, QuarantinedFile } from './port.js';
import { InvalidStoredRecord, StoredRecordValidator } from './record-validation.js';
import { type StoreFs, UnsafeFileError, nodeStoreFs } from './store-fs.js';
import { type JournalOp, JournalUndoError, RecordJournal } from './record-journal.js';
import { RecordSnapshot } from './record-snapshot.js';

// One JSON file per machine: <dir>/<name>.json. Writes go temp file -> fsync -> rename -> fsync
// dir, so a crash leaves the old record or the new one, never half of either. Writes are grouped:
// those that arrive while a batch is being committed form the next batch, which fsyncs the
// directory once for all of its records (group commit). Reads answer from memory and never wait.

interface PendingWrite {
  name: string;
  /** undefined: remove the record. */
  record: MachineRecord | undefined;
  waiters: Array<{ resolve: () => void; reject: (err: unknown) => void }>;
  /** Carried in the journal frame with the record (the events of its writes). */
  attachments: Attachment[];
}

const whatOf = (e: PendingWrite, file: string) => `cannot ${e.record ? 'write' : 'remove'} ${file}`;

export interface FileMachineStoreOptions {
  /** <stateDir>/machines; damaged files go to <stateDir>/quarantine. */
  dir: string;
  logger: Logger;
  /** Replace single file operations (tests inject ENOSPC and friends). */
  fs?: Partial<StoreFs>;
  /** Milliseconds since the epoch, for quarantine file names. */
  now?: () => number;
  /** Files read at once by load(): enough to hide latency, few enough to keep fds bounded. */
  loadConcurrency?: number;
  /** Checks each loaded record as the API checks a new one; the agent passes its configured limits. */
  validator?: StoredRecordValidator;
  /**
   * Write-ahead journal (e.g. <stateDir>/journal/records.log): a batch is durable with one
   * synced append of it; record files follow it unsynced (see fileLagMs) and are made durable at
   * checkpoints.
   */
  journalFile?: string;
  /** Journal bytes above which the store checkpoints after a batch. */
  checkpointBytes?: number;
  /**
   * With a journal: how long record files may trail it while writes keep coming. A batch that
   * comes at least this long after the last file update writes its files before its answers;
   * within it, files are written once for all the batches between (0: before every answer).
   */
  fileLagMs?: number;
  /** Times the file lag (the `now` above names quarantined files only). */
  clock?: Clock;
  /** Free space a journalled write must leave (MIN_FREE_BYTES); tests on a tiny tmpfs lower it. */
  minFreeBytes?: number;
  /**
   * A snapshot of the parsed records, written by close() and used by the next load() for every
   * file still as it was (record-snapshot.ts); key names the rules the records were checked by.
   */
  snapshot?: { file: string; key: string };
}

const DEFAULT_CHECKPOINT_BYTES = 4 * 1024 * 1024;
/** How long close() waits for the writes still queued or under way (a dead disk may hold them). */
const CLOSE_SETTLE_MS = 3000;
const DEFAULT_FILE_LAG_MS = 100;

/**
 * Free space a journalled write must leave. A journal append can fit in the slack of the file's
 * last block on a full disk and succeed, while the record file and the checkpoint cannot be
 * written: a write the agent could never make whole. So a batch that adds or changes records is
 * refused (StorageFailure, ENOSPC) unless the file system keeps this much, or four times the
 * batch, free. A batch of removals only is let through: it is how space comes back.
 */
export const MIN_FREE_BYTES = 256 * 1024;

/** No record comes near this (16 disks, 64 annotations of 4 KiB); a bigger file is not one of ours. */
export const MAX_RECORD_BYTES = 1024 * 1024;

const TEMP_FILE = /\.json\.tmp-[A-Za-z0-9]+$/;

export class FileMachineStore implements MachineStore {
  private readonly dir: string;
  private readonly quarantineDir: string;
  private readonly logger: Logger;
  private readonly fs: StoreFs;
  private readonly now: () => number;
  private readonly loadConcurrency: number;
  private readonly validator: StoredRecordValidator;
  private records = new Map<string, MachineRecord>();
  /**
   * Sorted view for list(), built on the first list() after a load and then kept in step by
   * setRecord (a binary search): re-sorting 10,000 names after any write cost each status line
   * (every 250 ms under writes) and each list() after a write about 1.6 ms.
   */
  private sorted: MachineRecord[] | undefined;
  /** Writes waiting for the next batch, one entry per record (the latest write wins). */
  private queue = new Map<string, PendingWrite>();
  /** The batch writing its temp files, then the batch renaming and fsyncing the folder. */
  private preparing: Map<string, PendingWrite> | undefined;
  private applying: Map<string, PendingWrite> | undefined;
  /** A start of the next batch is scheduled. */
  private startScheduled = false;
  /** Settles when the batch now renaming (if any) is done; batches rename one after another. */
  private applied: Promise<void> = Promise.resolve();
  private readonly journal: RecordJournal | undefined;
  private readonly checkpointBytes: number;
  private readonly minFreeBytes: number;
  /** Records changed since the last checkpoint: their files may not be durable yet. */
  private dirty = new Set<string>();
  private readonly fileLagMs: number;
  private readonly clock: Clock;
  /** Records whose file does not hold their latest (journalled) state yet. */
  private unwritten = new Set<string>();
  private lastFileUpdate = Number.NEGATIVE_INFINITY;
  private fileTimer: TimerHandle | undefined;
  private attachmentOwner: AttachmentOwner | undefined;
  private readonly snapshot: RecordSnapshot | undefined;
  /** close() has begun: files are written by it, no longer by the lag timer. */
  private closing = false;
  /** close() has settled: writes are refused. */
  private closed = false;
  /** Called once no write is queued or under way. */
  private idleWaiters: Array<() => void> = [];

  constructor(options: FileMachineStoreOptions) {
    this.dir = options.dir;
    this.quarantineDir = path.join(path.dirname(options.dir), 'quarantine');
    this.logger = options.logger;
    this.fs = { ...nodeStoreFs, ...options.fs };
    this.now = options.now ?? Date.now;
    this.loadConcurrency = options.loadConcurrency ?? 64;
    this.validator = options.validator ?? new StoredRecordValidator(DEFAULT_SPEC_LIMITS);
    this.journal = options.journalFile ? new RecordJournal({ file: options.journalFile, fs: this.fs }) : undefined;
    this.checkpointBytes = options.checkpointBytes ?? DEFAULT_CHECKPOINT_BYTES;
    this.minFreeBytes = options.minFreeBytes ?? MIN_FREE_BYTES;
    this.fileLagMs = options.fileLagMs ?? DEFAULT_FILE_LAG_MS;
    this.clock = options.clock ?? systemClock;
    this.snapshot = options.snapshot ? new RecordSnapshot(this.fs, options.snapshot.file, options.snapshot.key) : undefined;
  }

  /** With a journal, frames carry the owner's attachments; without one they are ignored. */
  carryAttachmentsOf(owner: AttachmentOwner): void {
    if (this.journal) this.attachmentOwner = owner;
  }

  async load(): Promise<LoadResult> {
    try {
      await this.fs.mkdir(this.dir, 0o700);
    } catch (err) {
      throw storageFailure(`cannot create ${this.dir}`, err);
    }
    let names: string[];
    try {
      names = await this.fs.readdir(this.dir);
    } catch (err) {
      throw storageFailure(`cannot list ${this.dir}`, err);
    }
    const records = new Map<string, MachineRecord>();
    const quarantined: QuarantinedFile[] = [];
    const files: string[] = [];
    const migrated = new Map<string, number>();
    const noteMigrated = (from: string) => migrated.set(from, (migrated.get(from) ?? 0) + 1);
    for (const file of names) {
      if (TEMP_FILE.test(file)) await this.removeLeftover(file);
      else if (file.endsWith('.json')) files.push(file);
    }
    const cached = await this.snapshot?.read(this.logger);
    let fromSnapshot = 0;
    let next = 0;
    const worker = async () => {
      while (next < files.length) {
        const file = files[next++]!;
        const name = file.slice(0, -'.json'.length);
        const kept = cached && (await this.snapshot!.recordIfUnchanged(cached, name, this.fileOf(name)));
        if (kept) {
          records.set(name, kept);
          fromSnapshot++;
          continue;
        }
        const outcome = await this.loadOne(file, noteMigrated);
        if ('record' in outcome) records.set(outcome.record.name, outcome.record);
        else if (outcome.quarantined) quarantined.push(outcome.quarantined);
      }
    };
    await Promise.all(Array.from({ length: Math.min(this.loadConcurrency, files.length) }, worker));
    for (const [from, count] of migrated) {
      this.logger.info('read machine records of an older format; each is rewritten in the current one on its next change', {
        from, to: RECORD_API_VERSION, records: count,
      });
    }
    if (this.journal) await this.replayJournal(this.journal, records, noteMigrated);
    for (const r of records.values()) freezeRecord(r);
    this.records = records;
    this.sorted = undefined;
    if (this.journal && this.dirty.size > 0) {
      try {
        await this.checkpoint(this.journal);
      } catch (err) {
        throw storageFailure(`cannot checkpoint the journal ${this.journal.path}`, err);
      }
    }
    return { records: records.size, quarantined, ...(this.snapshot ? { fromSnapshot } : {}) };
  }

  /**
   * Checkpoints (best effort: the journal holds every change anyway) and closes the journal file
   * (its fd would keep a file system busy); the store is not used after. A clean stop so leaves
   * durable files and an empty journal: the next start replays and rewrites nothing before its
   * first answer, where a stop after a burst of writes left it thousands of synced files to write.
   */
  async close(settleMs = CLOSE_SETTLE_MS): Promise<void> {
    this.closing = true;
    // Writes of operations that were under way when the agent stopped still land here (one
    // operation may write twice, idle for a moment in between): until the store stays idle.
    const deadline = this.clock.now() + settleMs;
    while (this.busy && this.clock.now() < deadline) await this.settled(deadline - this.clock.now());
    // From here on a write is refused, not lost to a closed journal.
    this.closed = true;
    this.fileTimer?.cancel();
    this.fileTimer = undefined;
    // A batch still running (a dead disk may hold it) keeps the slot: nothing is written under it.
    if (!this.busy) {
      this.preparing = new Map();
      await this.leaveFilesCurrent();
      await this.snapshot?.write(this.records, (name) => this.fileOf(name)).catch((err: unknown) =>
        this.logger.warn('cannot write the record snapshot; the next start reads every record file', { file: this.snapshot!.file, error: describeError(err) }));
    }
    await this.journal?.close();
  }

  /** Resolves once no write is queued or under way, or after waitMs. */
  private settled(waitMs: number): Promise<void> {
    return new Promise<void>((resolve) => {
      let timer: TimerHandle | undefined;
      const done = () => {
        timer?.cancel();
        const at = this.idleWaiters.indexOf(done);
        if (at >= 0) this.idleWaiters.splice(at, 1);
        resolve();
      };
      this.idleWaiters.push(done);
      timer = this.clock.setTimer(waitMs, done);
    });
  }

  private get busy(): boolean {
    return this.preparing !== undefined || this.applying !== undefined || this.startScheduled || this.queue.size > 0;
  }

  private notifyIfIdle(): void {
    if (!this.busy) for (const waiter of this.idleWaiters.splice(0)) waiter();
  }

  get(name: string): MachineRecord | undefined {
    return this.records.get(name);
  }

  list(): MachineRecord[] {
    this.sorted ??= [...this.records.keys()].sort().map((name) => this.records.get(name)!);
    return this.sorted.slice();
  }

  /**
   * Stores the record with resourceVersion one above both the latest and the given version, in
   * the current format: a record loaded from an older one is rewritten as such here. Resolves once
   * the record is durable; writes that arrive while a batch is being committed share the next one.
   */
  async put(record: MachineRecord, attachment?: Attachment): Promise<MachineRecord> {
    const name = validateMachineName(record.name);
    const next = cloneRecord(record);
    // Never go backwards, even if the caller started from a stale copy or a write is still queued.
    next.resourceVersion = Math.max(this.latest(name)?.resourceVersion ?? 0, record.resourceVersion) + 1;
    await this.enqueue(name, freezeRecord(next), this.attachmentOwner ? attachment : undefined);
    return next;
  }

  async remove(name: string): Promise<void> {
    // The name becomes a path: never let "../x" reach unlink.
    validateMachineName(name);
    await this.enqueue(name, undefined);
  }

  /** What the record will be once every queued write is durable (undefined: removed). */
  private latest(name: string): MachineRecord | undefined {
    const entry = this.queue.get(name) ?? this.preparing?.get(name) ?? this.applying?.get(name);
    return entry ? entry.record : this.records.get(name);
  }

  private enqueue(name: string, record: MachineRecord | undefined, attachment?: Attachment): Promise<void> {
    if (this.closed) return Promise.reject(new AgentError('StorageFailure', `cannot ${record ? 'write' : 'remove'} the record of ${name}: the record store is closed (vmkeeperd is stopping)`));
    return new Promise<void>((resolve, reject) => {
      let entry = this.queue.get(name);
      if (!entry) this.queue.set(name, (entry = { name, record, waiters: [], attachments: [] }));
      // Two writes to one record in one batch: the later wins, both are answered after it.
      entry.record = record;
      entry.waiters.push({ resolve, reject });
      if (attachment) entry.attachments.push(attachment);
      this.scheduleStart();
    });
  }

  private scheduleStart(): void {
    if (this.preparing || this.startScheduled) return;
    if (this.queue.size === 0) return this.notifyIfIdle();
    this.startScheduled = true;
    // Writes issued before the event loop turns (a burst of bus messages read at once, callers
    // answered by the last batch writing again) join this batch.
    setImmediate(() => {
      this.startScheduled = false;
      this.startBatch();
    });
  }

  /**
   * Takes the queue as a batch and writes its temp files, even while the previous batch is still
   * renaming and fsyncing the folder (temp files touch no record); its renames wait for that.
   */
  private startBatch(): void {
    if (this.journal) return this.startJournaledBatch(this.journal);
    if (this.preparing || this.queue.size === 0) return;
    const batch = this.queue;
    this.queue = new Map();
    this.preparing = batch;
    const entries = [...batch.values()];
    const previousBatch = this.applied;
    const done = (async () => {
      let failures: Map<PendingWrite, AgentError> | undefined;
      try {
        const temps = await this.writeTemps(entries);
        await previousBatch;
        this.preparing = undefined;
        this.applying = batch;
        this.scheduleStart();
        failures = await this.commit(entries, temps);
      } catch (err) {
        // commit() reports failures per entry; anything else still answers every caller.
        const failure = err instanceof AgentError ? err : storageFailure('cannot commit machine records', err);
        failures = new Map(entries.map((e) => [e, failure]));
        // Whatever failed, the next batch renames only after the one before this is done.
        await previousBatch;
      }
      if (this.preparing === batch) this.preparing = undefined;
      if (this.applying === batch) this.applying = undefined;
      for (const entry of entries) {
        const failure = failures?.get(entry);
        for (const w of entry.waiters) (failure ? w.reject(failure) : w.resolve());
      }
      this.scheduleStart();
    })();
    this.applied = done;
  }

  /** Writes and fsyncs every temp file of a batch; on any failure none is left and it throws. */
  private async writeTemps(entries: PendingWrite[]): Promise<string[]> {
    const temps = await Promise.allSettled(entries.map((e) => (e.record ? this.writeTemp(e.name, serialise(e.record)) : Promise.resolve(''))));
    const tempFailure = temps.find((t): t is PromiseRejectedResult => t.status === 'rejected');
    if (tempFailure) {
      await Promise.all(temps.map((t) => (t.status === 'fulfilled' && t.value ? this.fs.unlink(t.value).catch(() => undefined) : undefined)));
      throw tempFailure.reason;
    }
    return temps.map((t) => (t as PromiseFulfilledResult<string>).value);
  }

  /**
   * One batch, its temp files written and fsynced: every rename (or unlink), then one fsync of the
   * directory; memory changes only after that. On a failure the directory is put back as
   * it was (batch-wide, with one more directory fsync) and every entry gets a StorageFailure.
   */
  private async commit(entries: PendingWrite[], temps: string[]): Promise<Map<PendingWrite, AgentError> | undefined> {
    const previous = new Map(entries.map((e) => [e, this.records.get(e.name)]));
    const applied: PendingWrite[] = [];
    let stepFailure: AgentError | undefined;
    await Promise.all(entries.map(async (e, i) => {
      const file = this.fileOf(e.name);
      const temp = temps[i]!;
      try {
        if (e.record) {
          await this.fs.rename(temp, file);
          await this.snapshot?.noteWritten(e.name, e.record, file);
        } else await this.fs.unlink(file);
        applied.push(e);
      } catch (err) {
        if (e.record) {
          await this.fs.unlink(temp).catch(() => undefined);
          stepFailure ??= storageFailure(`${whatOf(e, file)}: rename failed`, err);
        } else if ((err as NodeJS.ErrnoException).code !== 'ENOENT') {
          stepFailure ??= storageFailure(`${whatOf(e, file)}: unlink failed`, err);
        }
      }
    }));
    if (stepFailure) return this.undoUnsynced(entries, applied, previous, () => stepFailure!);
    try {
      await this.syncDir();
    } catch (err) {
      return this.undoUnsynced(entries, applied, previous, (e) =>
        storageFailure(`${whatOf(e, this.fileOf(e.name))}: fsync of directory ${this.dir} failed`, err));
    }
    for (const e of entries) this.setRecord(e.name, e.record);
    return undefined;
  }

  /**
   * Renames and unlinks are in the directory but not durable: a restart may see either version.
   * Put each previous record back (rewrite it, or remove a new file) and fsync the directory once,
   * so the callers' StorageFailure is what a restart sees; where that fails too, memory follows
   * what the directory holds now and the message says so.
   */
  private async undoUnsynced(
    entries: PendingWrite[],
    applied: PendingWrite[],
    previous: Map<PendingWrite, MachineRecord | undefined>,
    failureOf: (e: PendingWrite) => AgentError,
  ): Promise<Map<PendingWrite, AgentError>> {
    const inDirectory = new Map(applied.map((e) => [e, e.record]));
    const undoErrors = new Map<PendingWrite, unknown>();
    await Promise.all(applied.map(async (e) => {
      const file = this.fileOf(e.name);
      const before = previous.get(e);
      try {
        if (before) {
          const temp = await this.writeTemp(e.name, serialise(before));
          await this.fs.rename(temp, file).catch(async (err: unknown) => {
            await this.fs.unlink(temp).catch(() => undefined);
            throw err;
          });
          await this.snapshot?.noteWritten(e.name, before, file);
        } else {
          await this.fs.unlink(file);
        }
        inDirectory.set(e, before);
      } catch (err) {
        undoErrors.set(e, err);
      }
    }));
    let syncError: unknown;
    if (undoErrors.size < applied.length) {
      try {
        await this.syncDir();
      } catch (err) {
        syncError = err;
      }
    }
    const failures = new Map<PendingWrite, AgentError>();
    for (const e of entries) {
      const failure = failureOf(e);
      const undoError = undoErrors.get(e) ?? (inDirectory.has(e) ? syncError : undefined);
      if (undoError === undefined) {
        failures.set(e, failure);
        continue;
      }
      const now = inDirectory.get(e) !== e.record
        ? 'undone, but the undo may not survive a power cut'
        : e.record ? 'the new record stays' : 'the record stays removed';
      const held = inDirectory.get(e);
      this.setRecord(e.name, held);
      this.logger.error('cannot undo an unsynced record change; memory follows the directory', {
        file: this.fileOf(e.name), resourceVersion: held?.resourceVersion ?? 0, outcome: now, error: describeError(undoError),
      });
      failures.set(e, new AgentError('StorageFailure', `${failure.message}; undoing it failed too (${now})`, { cause: failure }));
    }
    return failures;
  }

  /** Opens the journal and applies its batches over the records read from files (newest wins). */
  private async replayJournal(journal: RecordJournal, records: Map<string, MachineRecord>, migrated: (from: string) => void): Promise<void> {
    const journalDir = path.dirname(journal.path);
    let opened: Awaited<ReturnType<RecordJournal['open']>>;
    try {
      await this.fs.mkdir(journalDir, 0o700);
      opened = await journal.open();
      // The journal's own directory entry must survive a power cut, or its batches would not.
      await this.syncDir(journalDir);
    } catch (err) {
      throw storageFailure(`cannot open the journal ${journal.path}`, err);
    }
    if (opened.tornBytes > 0) this.logger.warn('dropped a torn tail of the record journal', { file: journal.path, bytes: opened.tornBytes });
    const attached: unknown[] = [];
    for (const batch of opened.batches) {
      for (const op of batch) {
        if (Array.isArray(op.attached)) attached.push(...op.attached);
        this.dirty.add(op.name);
        if (!op.record) {
          records.delete(op.name);
          continue;
        }
        try {
          const warn = (repaired: string) => this.logger.warn('repaired a journalled machine record on replay', { name: op.name, repaired });
          records.set(op.name, this.validator.parse(JSON.stringify(op.record), op.name, warn, migrated));
        } catch (err) {
          this.logger.error('skipped an invalid record in the journal', { name: op.name, error: describeError(err) });
        }
      }
    }
    // Before the checkpoint below empties the journal, its owner takes back what it attached.
    if (attached.length > 0) this.attachmentOwner?.recover(attached);
  }

  /**
   * One batch at a time: one synced journal append, then the record files, then the answers. The
   * writes that arrived during the append start theirs before this batch's callers are answered,
   * so the answers' work (replies, signals) runs beside the next sync instead of before it.
   */
  private startJournaledBatch(journal: RecordJournal): void {
    if (this.preparing || this.queue.size === 0) return;
    const batch = this.queue;
    this.queue = new Map();
    this.preparing = batch;
    const entries = [...batch.values()];
    void (async () => {
      const failure = await this.commitJournaled(journal, entries);
      // Nothing else needs the slot now (no file update, no checkpoint, no close): hand it on.
      const handOn = !failure && this.queue.size > 0 && !this.closing && !this.fileUpdateDue() && journal.size <= this.checkpointBytes;
      if (handOn) {
        this.preparing = undefined;
        this.startJournaledBatch(journal);
      } else if (!failure && this.fileUpdateDue()) {
        // After a quiet spell the files are written before the answers, so a caller that reads its
        // record file finds its change there; in a burst they are written once per fileLagMs.
        await this.writeUnwrittenFiles();
      }
      for (const entry of entries) for (const w of entry.waiters) (failure ? w.reject(failure) : w.resolve());
      if (this.unwritten.size > 0) this.scheduleFileUpdate();
      if (handOn) return;
      // Still holding the batch slot: a batch appended during the checkpoint would be cut off with it.
      if (!failure && journal.size > this.checkpointBytes) {
        // The writes are durable in the journal; a failed checkpoint only delays the next one.
        await this.checkpoint(journal).catch((err: unknown) =>
          this.logger.error('cannot checkpoint the record journal; retrying after the next batch', { file: journal.path, error: describeError(err) }));
      }
      this.preparing = undefined;
      this.scheduleStart();
    })();
  }

  private async commitJournaled(journal: RecordJournal, entries: PendingWrite[]): Promise<AgentError | undefined> {
    const ops: JournalOp[] = entries.map((e) =>
      e.attachments.length > 0 ? { name: e.name, record: e.record ?? null, attached: e.attachments.map((a) => a.entry) } : { name: e.name, record: e.record ?? null });
    try {
      // The free-space check runs in the append, before the write: a synchronous statfs
      // (StoreFs.freeBytes), so it adds no thread-pool round trip to the batch.
      await journal.append(ops, entries.some((e) => e.record) ? (frameBytes) => this.ensureFreeSpace(frameBytes) : undefined);
    } catch (err) {
      if (err instanceof JournalUndoError) {
        // The frame may be on disk, and a restart would bring its attachments back: their owner
        // keeps them (the caller is told of the failure all the same).
        for (const e of entries) for (const a of e.attachments) a.carried();
        this.logger.error('cannot cut a failed batch off the record journal; a restart may apply it, and the next write cuts it first (refused while that fails)', { file: journal.path, error: describeError(err.undoError) });
        return storageFailure(`cannot append to the journal ${journal.path}; undoing it failed too (the change may survive a restart)`, err.appendError);
      }
      return storageFailure(`cannot append to the journal ${journal.path}`, err);
    }
    for (const e of entries) {
      this.setRecord(e.name, e.record);
      this.dirty.add(e.name);
      this.unwritten.add(e.name);
      // Now, before any checkpoint can run: its owner must know the entry is in the journal.
      for (const a of e.attachments) a.carried();
    }
    return undefined;
  }

  private fileUpdateDue(): boolean {
    return this.clock.now() - this.lastFileUpdate >= this.fileLagMs;
  }

  /** A file update fileLagMs after the last, in the batch slot (a batch running then does it instead). */
  private scheduleFileUpdate(): void {
    if (this.fileTimer || this.closing) return;
    const wait = Math.max(0, this.lastFileUpdate + this.fileLagMs - this.clock.now());
    this.fileTimer = this.clock.setTimer(wait, () => {
      this.fileTimer = undefined;
      if (this.preparing || this.unwritten.size === 0) return;
      this.preparing = new Map();
      void this.writeUnwrittenFiles().finally(() => {
        this.preparing = undefined;
        this.scheduleStart();
      });
    });
  }

  /** Durable in the journal already: the files follow, whole (temp + rename), unsynced. */
  /** At close: a checkpoint; should it fail, at least the files the journal is ahead of are rewritten. */
  private async leaveFilesCurrent(): Promise<void> {
    if (this.journal && this.dirty.size > 0) {
      try {
        return await this.checkpoint(this.journal);
      } catch (err) {
        this.logger.warn('cannot checkpoint the record journal at close; the next start replays it', { file: this.journal.path, error: describeError(err) });
      }
    }
    if (this.unwritten.size > 0) await this.writeUnwrittenFiles();
  }

  private async writeUnwrittenFiles(): Promise<void> {
    const names = [...this.unwritten];
    this.unwritten.clear();
    this.lastFileUpdate = this.clock.now();
    await Promise.all(names.map((name) => this.writeThrough(name)));
  }

  /** The batch's frame size stands for the bytes its record files and the next checkpoint take. */
  private async ensureFreeSpace(frameBytes: number): Promise<void> {
    const need = Math.max(this.minFreeBytes, 4 * frameBytes);
    const free = await this.fs.freeBytes(this.dir);
    if (free >= need) return;
    throw Object.assign(new Error(`ENOSPC: ${free} bytes free on the state file system, a write keeps ${need} free so its record file and checkpoint fit`), { code: 'ENOSPC' });
  }

  private async writeThrough(name: string): Promise<void> {
    const file = this.fileOf(name);
    const record = this.records.get(name);
    try {
      if (record) await this.replaceFile(name, record, false);
      else await this.fs.unlink(file).catch((err: NodeJS.ErrnoException) => { if (err.code !== 'ENOENT') throw err; });
    } catch (err) {
      // The journal holds the change; the next checkpoint rewrites the file.
      this.logger.warn('cannot update a record file; the journal holds the change', { file, error: describeError(err) });
    }
  }

  private async replaceFile(name: string, record: MachineRecord, sync: boolean): Promise<void> {
    const temp = await this.writeTemp(name, serialise(record), sync);
    await this.fs.rename(temp, this.fileOf(name)).catch(async (err: unknown) => {
      await this.fs.unlink(temp).catch(() => undefined);
      throw err;
    });
    await this.snapshot?.noteWritten(name, record, this.fileOf(name));
  }

  /** Makes every changed record file durable (rewritten synced, or removed), then empties the journal. */
  private async checkpoint(journal: RecordJournal): Promise<void> {
    // The journal is emptied below: what its frames carry must be durable with its owner first.
    await this.attachmentOwner?.secure();
    const names = [...this.dirty];
    // Every rewrite ends before a failure is reported: none may still run under what comes next.
    const rewrites = await Promise.allSettled(names.map(async (name) => {
      const record = this.records.get(name);
      if (record) await this.replaceFile(name, record, true);
      else await this.fs.unlink(this.fileOf(name)).catch((err: NodeJS.ErrnoException) => { if (err.code !== 'ENOENT') throw err; });
    }));
    const failed = rewrites.find((r) => r.status === 'rejected');
    if (failed) throw failed.reason;
    await this.syncDir();
    await journal.reset();
    for (const name of names) {
      this.dirty.delete(name);
      this.unwritten.delete(name);
    }
  }

  private setRecord(name: string, record: MachineRecord | undefined): void {
    if (record) this.records.set(name, record);
    else this.records.delete(name);
    if (this.sorted) placeSorted(this.sorted, name, record);
  }

  private fileOf(name: string): string {
    return path.join(this.dir, `${name}.json`);
  }

  /** temp file -> write -> fsync -> close; returns its path. On failure no temp file is left. */
  private async writeTemp(name: string, data: Buffer, sync = true): Promise<string> {
    const target = this.fileOf(name);
    const temp = `${target}.tmp-${randomBytes(6).toString('hex')}`;
    let fd: number | undefined;
    let step = 'create temp file';
    try {
      fd = await this.fs.open(temp, 'wx', 0o600);
      step = 'write';
      await this.fs.write(fd, data);
      step = 'fsync';
      if (sync) await this.fs.fsync(fd);
      step = 'close';
      const closing = fd;
      fd = undefined;
      await this.fs.close(closing);
      return temp;
    } catch (err) {
      if (fd !== undefined) await this.fs.close(fd).catch(() => undefined);
      await this.fs.unlink(temp).catch(() => undefined);
      throw storageFailure(`cannot write ${target}: ${step} failed`, err);
    }
  }

  /** Makes renames and unlinks durable: without it a power cut can bring the old entries back. */
  private async syncDir(dir = this.dir): Promise<void> {
    let fd: number | undefined;
    try {
      fd = await this.fs.open(dir, 'r');
      await this.fs.fsync(fd);
    } finally {
      if (fd !== undefined) await this.fs.close(fd).catch(() => undefined);
    }
  }

  private async removeLeftover(file: string): Promise<void> {
    const full = path.join(this.dir, file);
    try {
      await this.fs.unlink(full);
      this.logger.info('removed temp file left by an interrupted write', { file: full });
    } catch (err) {
      this.logger.warn('cannot remove leftover temp file', { file: full, error: describeError(err) });
    }
  }

  private async loadOne(file: string, migrated: (from: string) => void): Promise<{ record: MachineRecord } | { quarantined?: QuarantinedFile }> {
    const full = path.join(this.dir, file);
    const name = file.slice(0, -'.json'.length);
    let reason: string;
    try {
      const { text, stamp } = await this.fs.readStampedFile(full, MAX_RECORD_BYTES);
      // A record repaired or migrated on the way in is read from its file (and logged) at each
      // start until it is rewritten, so the snapshot never holds it.
      let asIs = true;
      const warn = (repaired: string) => {
        asIs = false;
        this.logger.warn('repaired a machine record on load', { file: full, repaired });
      };
      const record = this.validator.parse(text, name, warn, (from) => (asIs = false, migrated(from)));
      if (asIs) this.snapshot?.noteRead(name, record, stamp);
      return { record };
    } catch (err) {
      // Unreadable (EIO, a FIFO, a link) or invalid: set it aside, keep starting.
      reason = quarantineReason(err);
    }
    return { quarantined: await this.quarantine(file, reason) };
  }

  /** The quarantine folder itself is never followed if someone made it a link. */
  private async ensureQuarantineDir(): Promise<void> {
    const kind = await this.fs.entryKind(this.quarantineDir);
    if (kind === 'missing') await this.fs.mkdir(this.quarantineDir, 0o700);
    else if (kind !== 'directory') throw new Error(`${this.quarantineDir} is a ${kind}, not a directory: not following it`);
  }

  private async quarantine(file: string, reason: string): Promise<QuarantinedFile | undefined> {
    const from = path.join(this.dir, file);
    const stamp = new Date(this.now()).toISOString().replace(/:/g, '-');
    const movedTo = path.join(this.quarantineDir, `${file}.${stamp}`);
    try {
      await this.ensureQuarantineDir();
      await this.fs.rename(from, movedTo);
    } catch (err) {
      this.logger.error('cannot quarantine a damaged machine record; ignoring it', { file: from, reason, error: describeError(err) });
      return undefined;
    }
    this.logger.warn('quarantined a damaged machine record', { file: from, movedTo, reason });
    return { file: from, movedTo, reason };
  }
}

const serialise = (record: MachineRecord) => Buffer.from(`${JSON.stringify(record, null, 2)}\n`);

/** Why a file is set aside, in words that never include its content. */
function quarantineReason(err: unknown): string {
  if (err instanceof InvalidStoredRecord || err instanceof UnsafeFileError) return err.message;
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  if (code === 'ELOOP') return 'is a symbolic link';
  return code ? `cannot read: ${code}` : 'cannot read';
}

function storageFailure(what: string, err: unknown): AgentError {
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  const detail = code ? `${code} (${describeError(err).replace(/^[A-Z]+: /, '').replace(/, \w+( '.*')?$/, '')})` : describeError(err);
  return new AgentError('StorageFailure', `${what}: ${detail}`, { cause: err });
}

/** Puts `record` under `name` in the sorted view: replaces, inserts, or removes when undefined. */
function placeSorted(sorted: MachineRecord[], name: string, record: MachineRecord | undefined): void {
  // Every record is stored under its own name (put, load and replay check it).
  const at = sortedIndexOf(sorted, name, nameOfRecord);
  const present = sorted[at]?.name === name;
  if (record) sorted.splice(at, present ? 1 : 0, record);
  else if (present) sorted.splice(at, 1);
}

const nameOfRecord = (record: MachineRecord) => record.name;
