import path from 'node:path';
import type { Logger } from '../logging/logger.js';
import { describeError } from '../machine/errors.js';
import { ATOMIC_TEMP_FILE, syncDirectory, writeFileAtomic } from '../store/atomic-file.js';
import { nodeStoreFs, type StoreFs } from '../store/store-fs.js';
import type { ShutdownRecord, ShutdownRecordReader } from './stop-procedure.js';

// The persisted stop runs: one JSON file per run, <stateDir>/shutdowns/<id>.json, each replaced
// whole (temp file, fsync, rename, folder fsync) so a power cut mid-write keeps the last version.
// Loaded once at start: a run still "in-progress" then was cut off (power loss, kill -9) and is
// kept as "interrupted". Only the newest ones are kept.

export interface ShutdownRecordsOptions {
  /** Where the files go; without it the records live in memory only (unit tests, like the event journal). */
  dir?: string;
  logger: Logger;
  fs?: StoreFs;
  /** How many records are kept; older files are deleted. */
  keep?: number;
}

const ID_PATTERN = /^(\d{8}T\d{6}Z)-(\d{1,9})$/;
const MAX_FILE_BYTES = 4 * 1024 * 1024;
const KINDS = new Set(['host-shutdown', 'service-stop', 'drain']);
const RESULTS = new Set(['in-progress', 'completed', 'cancelled', 'interrupted']);

export class ShutdownRecords implements ShutdownRecordReader {
  private readonly fs: StoreFs;
  private readonly keep: number;
  private readonly byId = new Map<string, ShutdownRecord>();
  /** Writes one after another, so a file never goes back to an older version. */
  private writing: Promise<void> = Promise.resolve();

  constructor(private readonly o: ShutdownRecordsOptions) {
    this.fs = o.fs ?? nodeStoreFs;
    this.keep = o.keep ?? 50;
  }

  /** Reads every record file; unreadable ones are skipped (one warning names them all). */
  async load(): Promise<void> {
    const dir = this.o.dir;
    if (dir === undefined) return;
    await this.fs.mkdir(dir, 0o700);
    const skipped: string[] = [];
    for (const entry of (await this.fs.readdir(dir)).sort()) {
      const file = path.join(dir, entry);
      if (ATOMIC_TEMP_FILE.test(entry)) {
        await this.fs.unlink(file).catch(() => undefined); // a write cut off by a crash
        continue;
      }
      if (!entry.endsWith('.json')) continue;
      try {
        const record = parseShutdownRecord(await this.fs.readRegularFile(file, MAX_FILE_BYTES));
        if (`${record.id}.json` !== entry) throw new Error(`its id ${record.id} does not match the file name`);
        this.byId.set(record.id, record);
      } catch (err) {
        skipped.push(`${entry} (${describeError(err)})`);
      }
    }
    if (skipped.length) this.o.logger.warn(`skipped ${skipped.length} unreadable shutdown records in ${dir}: ${skipped.join('; ')}`);
    for (const r of this.byId.values()) {
      if (r.result !== 'in-progress') continue;
      // The agent that wrote it died mid-run: say so, and keep saying so.
      const interrupted: ShutdownRecord = { ...r, result: 'interrupted' };
      this.o.logger.warn(`shutdown record ${r.id} (${r.kind}) was still in progress: the agent stopped during it; marked interrupted`);
      await this.save(interrupted).catch((err) => this.o.logger.warn(`cannot mark shutdown record ${r.id} interrupted: ${describeError(err)}`));
      this.byId.set(r.id, interrupted);
    }
    await this.prune();
  }

  /** Oldest first. */
  list(): readonly ShutdownRecord[] {
    return [...this.byId.values()].sort(compareRecords).map(clone);
  }

  get(id: string): ShutdownRecord | undefined {
    const r = this.byId.get(id);
    return r && clone(r);
  }

  /** A new id for a run starting at startedAt: its time to the second, then a counter. */
  newId(startedAt: number): string {
    const stamp = new Date(startedAt).toISOString().replace(/[-:]/g, '').replace(/\.\d{3}Z$/, 'Z');
    let n = 1;
    while (this.byId.has(`${stamp}-${n}`)) n++;
    return `${stamp}-${n}`;
  }

  /** Persists the record (a copy of it) atomically, then drops records beyond the newest ones kept. */
  save(record: ShutdownRecord): Promise<void> {
    if (!ID_PATTERN.test(record.id)) return Promise.reject(new Error(`invalid shutdown record id ${JSON.stringify(record.id)}`));
    const copy = clone(record);
    this.byId.set(copy.id, copy);
    const dir = this.o.dir;
    const write = this.writing.then(async () => {
      if (dir !== undefined) await writeFileAtomic(this.fs, path.join(dir, `${copy.id}.json`), `${JSON.stringify(copy, null, 2)}\n`);
      await this.prune();
    });
    this.writing = write.catch(() => undefined);
    return write;
  }

  private async prune(): Promise<void> {
    const all = [...this.byId.values()].sort(compareRecords);
    const old = all.slice(0, Math.max(0, all.length - this.keep)).filter((r) => r.result !== 'in-progress');
    if (old.length === 0) return;
    for (const r of old) this.byId.delete(r.id);
    const dir = this.o.dir;
    if (dir === undefined) return;
    for (const r of old) {
      await this.fs.unlink(path.join(dir, `${r.id}.json`)).catch((err: NodeJS.ErrnoException) => {
        if (err.code !== 'ENOENT') this.o.logger.warn(`cannot delete old shutdown record ${r.id}: ${describeError(err)}`);
      });
    }
    await syncDirectory(this.fs, dir);
  }
}

function compareRecords(a: ShutdownRecord, b: ShutdownRecord): number {
  return a.startedAt - b.startedAt || counterOf(a.id) - counterOf(b.id) || a.id.localeCompare(b.id);
}

const counterOf = (id: string) => Number(ID_PATTERN.exec(id)?.[2] ?? 0);
const clone = (r: ShutdownRecord): ShutdownRecord => structuredClone(r);

/** A record file's text into a record; throws naming what is wrong. */
export function parseShutdownRecord(text: string): ShutdownRecord {
  const r = JSON.parse(text) as Partial<ShutdownRecord>;
  const fail = (what: string) => {
    throw new Error(`not a shutdown record: ${what}`);
  };
  if (typeof r !== 'object' || r === null) fail('not a JSON object');
  if (typeof r.id !== 'string' || !ID_PATTERN.test(r.id)) fail('id');
  if (!KINDS.has(r.kind as string)) fail('kind');
  if (!RESULTS.has(r.result as string)) fail('result');
  for (const k of ['startedAt', 'finishedAt', 'boundSec'] as const) if (typeof r[k] !== 'number') fail(k);
  if (!Array.isArray(r.groups)) fail('groups');
  if (!Array.isArray(r.machines) || !r.machines.every((m) => typeof m?.machine === 'string' && typeof m?.result === 'string')) fail('machines');
  return r as ShutdownRecord;
}
