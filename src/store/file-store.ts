import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { AgentError, describeError } from '../machine/errors.js';
import { validateMachineName } from '../machine/names.js';
import { type MachineRecord, RECORD_API_VERSION, cloneRecord, freezeRecord } from '../machine/record.js';
import { DEFAULT_SPEC_LIMITS } from '../machine/spec.js';
import { KeyedLock } from '../lifecycle/keyed-lock.js';
import type { Logger } from '../logging/logger.js';
import type { LoadResult, MachineStore, QuarantinedFile } from './port.js';
import { InvalidStoredRecord, StoredRecordValidator } from './record-validation.js';
import { type StoreFs, UnsafeFileError, nodeStoreFs } from './store-fs.js';

// One JSON file per machine: <dir>/<name>.json. Writes go temp file -> fsync -> rename -> fsync
// dir, so a crash leaves the old record or the new one, never half of either.

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
}

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
  /** Sorted view for list(), rebuilt only after a change. */
  private sorted: MachineRecord[] | undefined;
  /** Operations on one record file run one at a time. */
  private readonly fileLock = new KeyedLock();

  constructor(options: FileMachineStoreOptions) {
    this.dir = options.dir;
    this.quarantineDir = path.join(path.dirname(options.dir), 'quarantine');
    this.logger = options.logger;
    this.fs = { ...nodeStoreFs, ...options.fs };
    this.now = options.now ?? Date.now;
    this.loadConcurrency = options.loadConcurrency ?? 64;
    this.validator = options.validator ?? new StoredRecordValidator(DEFAULT_SPEC_LIMITS);
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
    let next = 0;
    const worker = async () => {
      while (next < files.length) {
        const file = files[next++]!;
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
    for (const r of records.values()) freezeRecord(r);
    this.records = records;
    this.sorted = undefined;
    return { records: records.size, quarantined };
  }

  get(name: string): MachineRecord | undefined {
    return this.records.get(name);
  }

  list(): MachineRecord[] {
    this.sorted ??= [...this.records.keys()].sort().map((name) => this.records.get(name)!);
    return this.sorted.slice();
  }

  /**
   * Stores the record with resourceVersion one above both the stored and the given version, in
   * the current format: a record loaded from an older one is rewritten as such here.
   */
  async put(record: MachineRecord): Promise<MachineRecord> {
    const name = validateMachineName(record.name);
    return this.fileLock.run(name, async () => {
      const current = this.records.get(name);
      const next = cloneRecord(record);
      // Never go backwards, even if the caller started from a stale copy.
      next.resourceVersion = Math.max(current?.resourceVersion ?? 0, record.resourceVersion) + 1;
      const what = `cannot write ${this.fileOf(name)}`;
      await this.replaceFile(name, serialise(next), what);
      try {
        await this.syncDir(what);
      } catch (err) {
        await this.undoUnsyncedChange(name, current, next, err as AgentError);
      }
      this.setRecord(name, freezeRecord(next));
      return next;
    });
  }

  /**
   * A rename or unlink is in the directory but not durable: a restart may see either version. Put
   * the previous one back (rewrite it, or remove a new file) durably, so the caller's StorageFailure
   * is what a restart sees; if that fails too, memory follows what the directory holds now.
   * `changed` is what the directory holds after the failed change (undefined: the file was removed).
   * Always throws.
   */
  private async undoUnsyncedChange(
    name: string,
    previous: MachineRecord | undefined,
    changed: MachineRecord | undefined,
    failure: AgentError,
  ): Promise<never> {
    const file = this.fileOf(name);
    let inDirectory = changed;
    try {
      if (previous) await this.replaceFile(name, serialise(previous), `cannot restore ${file}`);
      else await this.fs.unlink(file);
      inDirectory = previous;
      await this.syncDir(`cannot restore ${file}`);
    } catch (undoError) {
      this.setRecord(name, inDirectory && freezeRecord(inDirectory));
      const now = inDirectory !== changed
        ? 'undone, but the undo may not survive a power cut'
        : changed ? 'the new record stays' : 'the record stays removed';
      this.logger.error('cannot undo an unsynced record change; memory follows the directory', {
        file, resourceVersion: inDirectory?.resourceVersion ?? 0, outcome: now, error: describeError(undoError),
      });
      throw new AgentError('StorageFailure', `${failure.message}; undoing it failed too (${now})`, { cause: failure });
    }
    throw failure;
  }

  private setRecord(name: string, record: MachineRecord | undefined): void {
    if (record) this.records.set(name, record);
    else this.records.delete(name);
    this.sorted = undefined;
  }

  async remove(name: string): Promise<void> {
    // The name becomes a path: never let "../x" reach unlink.
    validateMachineName(name);
    return this.fileLock.run(name, async () => {
      const file = this.fileOf(name);
      let removed = true;
      try {
        await this.fs.unlink(file);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw storageFailure(`cannot remove ${file}`, err);
        removed = false;
      }
      try {
        await this.syncDir(`cannot remove ${file}`);
      } catch (err) {
        const current = this.records.get(name);
        if (removed && current) await this.undoUnsyncedChange(name, current, undefined, err as AgentError);
        throw err;
      }
      this.setRecord(name, undefined);
    });
  }

  private fileOf(name: string): string {
    return path.join(this.dir, `${name}.json`);
  }

  /** temp file -> fsync -> rename; on failure the target is untouched and the temp file gone. */
  private async replaceFile(name: string, data: Buffer, what: string): Promise<void> {
    const target = this.fileOf(name);
    const temp = `${target}.tmp-${randomBytes(6).toString('hex')}`;
    let fd: number | undefined;
    let step = 'create temp file';
    try {
      fd = await this.fs.open(temp, 'wx', 0o600);
      step = 'write';
      await this.fs.write(fd, data);
      step = 'fsync';
      await this.fs.fsync(fd);
      step = 'close';
      const closing = fd;
      fd = undefined;
      await this.fs.close(closing);
      step = 'rename';
      await this.fs.rename(temp, target);
    } catch (err) {
      if (fd !== undefined) await this.fs.close(fd).catch(() => undefined);
      await this.fs.unlink(temp).catch(() => undefined);
      throw storageFailure(`${what}: ${step} failed`, err);
    }
  }

  /** Makes a rename or unlink durable: without it a power cut can bring the old entry back. */
  private async syncDir(what: string): Promise<void> {
    let fd: number | undefined;
    try {
      fd = await this.fs.open(this.dir, 'r');
      await this.fs.fsync(fd);
    } catch (err) {
      throw storageFailure(`${what}: fsync of directory ${this.dir} failed`, err);
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
    let reason: string;
    try {
      const text = await this.fs.readRegularFile(full, MAX_RECORD_BYTES);
      const warn = (repaired: string) => this.logger.warn('repaired a machine record on load', { file: full, repaired });
      return { record: this.validator.parse(text, file.slice(0, -'.json'.length), warn, migrated) };
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
