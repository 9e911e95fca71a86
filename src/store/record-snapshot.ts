import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { crc32 } from 'node:zlib';
import type { Logger } from '../logging/logger.js';
import type { MachineRecord } from '../machine/record.js';
import type { FileStamp, StoreFs } from './store-fs.js';

// A cache of the parsed record files, written at a clean stop so the next start does not open,
// read and check 10,000 files one by one (most of its time before the first answer). Each entry
// pairs a record with the stamp of the file it was read from or written to; at load an entry
// counts only while its file still has that stamp, so an edited, copied over, restored or
// replaced file is read again, and a missing file is a removed record. The files stay the truth:
// a lost, torn, stale or foreign snapshot only makes the start slower. Entries are also bound to
// the rules they were checked by (the agent version and the spec limits in force, the "key"): a
// start under other rules reads every file again.

const FORMAT = 'vmkeeper-records-snapshot/1';

/** No snapshot of ours comes near this (10,000 records are about 10 MiB). */
const MAX_SNAPSHOT_BYTES = 1024 * 1024 * 1024;

/** Name, file stamp id, record. */
type SnapshotEntry = [name: string, stamp: string, record: MachineRecord];

/** The entries of a usable snapshot, by name. */
export type SnapshotEntries = Map<string, SnapshotEntry>;

interface Header {
  format: string;
  key: string;
  entries: number;
  crc32: number;
}

/** What a record file is known to hold: the record read from it or written to it, and the stamp of that version. */
interface KnownFile {
  record: MachineRecord;
  stamp: string;
}

export class RecordSnapshot {
  /** Record files whose content this store knows (read or written by it), by record name. */
  private readonly known = new Map<string, KnownFile>();

  constructor(
    private readonly fs: StoreFs,
    readonly file: string,
    /** The rules the records were checked by; a snapshot under another key is not used. */
    private readonly key: string,
  ) {}

  /** The usable entries, or undefined (logged why, unless none was written). Never throws. */
  async read(logger: Logger): Promise<SnapshotEntries | undefined> {
    await this.removeLeftovers();
    const read = await this.readEntries();
    if (typeof read !== 'string') return read;
    if (read !== 'none written') logger.info('record snapshot not used; reading every record file', { file: this.file, why: read });
    return undefined;
  }

  /** The snapshot's record for name, if the file is still the version it was taken from. */
  async recordIfUnchanged(entries: SnapshotEntries, name: string, file: string): Promise<MachineRecord | undefined> {
    const entry = entries.get(name);
    if (!entry) return undefined;
    const now = await this.fs.stamp(file).catch(() => undefined);
    if (now?.id !== entry[1]) return undefined;
    this.known.set(name, { record: entry[2], stamp: entry[1] });
    return entry[2];
  }

  /** A record parsed from a file as it is (not repaired, not migrated), with the stamp of the version read. */
  noteRead(name: string, record: MachineRecord, stamp: FileStamp): void {
    this.known.set(name, { record, stamp: stamp.id });
  }

  /**
   * Right after a rename put this record's file in place: the stamp is taken before any other
   * file operation's completion is handled, so it is of this version.
   */
  async noteWritten(name: string, record: MachineRecord, file: string): Promise<void> {
    const stamp = await this.fs.stamp(file).catch(() => undefined);
    if (stamp) this.known.set(name, { record, stamp: stamp.id });
    else this.known.delete(name);
  }

  /**
   * Replaces the snapshot whole (temp file, rename) with every record whose file still holds it:
   * read or written by this store and not changed since (a file changed behind the store while it
   * ran is read again at the next start). Not synced: a snapshot lost to a power cut only means
   * the files are read, and a stale one is caught by its stamps.
   */
  async write(records: ReadonlyMap<string, MachineRecord>, fileOf: (name: string) => string): Promise<void> {
    const entries: SnapshotEntry[] = [];
    for (const [name, record] of records) {
      const known = this.known.get(name);
      if (known?.record !== record) continue;
      const stamp = await this.fs.stamp(fileOf(name));
      if (stamp?.id === known.stamp) entries.push([name, stamp.id, record]);
    }
    const body = JSON.stringify(entries);
    const header: Header = { format: FORMAT, key: this.key, entries: entries.length, crc32: crc32(body) };
    const temp = `${this.file}.tmp-${randomBytes(6).toString('hex')}`;
    const fd = await this.fs.open(temp, 'wx', 0o600);
    try {
      try {
        await this.fs.write(fd, Buffer.from(`${JSON.stringify(header)}\n${body}`));
      } finally {
        await this.fs.close(fd);
      }
      await this.fs.rename(temp, this.file);
    } catch (err) {
      await this.fs.unlink(temp).catch(() => undefined);
      throw err;
    }
  }

  /** Temp files of a write cut short (a crash while stopping). */
  private async removeLeftovers(): Promise<void> {
    const dir = path.dirname(this.file);
    const prefix = `${path.basename(this.file)}.tmp-`;
    const names = await this.fs.readdir(dir).catch(() => [] as string[]);
    for (const name of names) if (name.startsWith(prefix)) await this.fs.unlink(path.join(dir, name)).catch(() => undefined);
  }

  /** The entries by name, or why the snapshot cannot be used (missing, torn, another format or key). */
  private async readEntries(): Promise<SnapshotEntries | string> {
    let text: string;
    try {
      text = await this.fs.readRegularFile(this.file, MAX_SNAPSHOT_BYTES);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      return code === 'ENOENT' ? 'none written' : `unreadable (${code ?? (err as Error).message})`;
    }
    const newline = text.indexOf('\n');
    let header: Header;
    let entries: SnapshotEntry[];
    try {
      header = JSON.parse(text.slice(0, newline)) as Header;
      if (header.format !== FORMAT) return `another format (${String(header.format)})`;
      if (header.key !== this.key) return 'written under other rules (agent version or spec limits)';
      const body = text.slice(newline + 1);
      if (crc32(body) !== header.crc32) return 'torn or damaged (checksum)';
      entries = JSON.parse(body) as SnapshotEntry[];
    } catch {
      return 'torn or damaged (not JSON)';
    }
    if (!Array.isArray(entries) || entries.length !== header.entries) return 'torn or damaged (entry count)';
    return new Map(entries.map((e) => [e[0], e]));
  }
}
