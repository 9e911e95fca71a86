import { crc32 } from 'node:zlib';
import { describeError } from '../machine/errors.js';
import type { MachineRecord } from '../machine/record.js';
import type { StoreFs } from './store-fs.js';

// Write-ahead journal of record changes: one frame per batch, appended and made durable by one
// synced write, so concurrent writes share a single sync. Frame: magic, payload length, CRC-32 of the
// payload (12 bytes, big-endian), then the payload (JSON). A torn or damaged tail fails its
// length or checksum and is dropped, with everything after it.

/** One change in a batch; record null removes it. */
export interface JournalOp {
  name: string;
  record: MachineRecord | null;
  /**
   * Entries another part made durable with this change (the events of its writes). An older agent
   * reading the journal ignores the field: a downgrade keeps every record, and loses the events a
   * crash kept out of the event journal (docs/operations.md).
   */
  attached?: unknown[];
}

const MAGIC = 0x564d4b4a; // "VMKJ"
const HEADER_BYTES = 12;
/** A frame claiming more is damage, not a batch of ours (a batch holds at most a few records). */
const MAX_FRAME_BYTES = 256 * 1024 * 1024;

export function encodeBatch(ops: JournalOp[]): Buffer {
  const payload = Buffer.from(JSON.stringify(ops));
  const header = Buffer.alloc(HEADER_BYTES);
  header.writeUInt32BE(MAGIC, 0);
  header.writeUInt32BE(payload.length, 4);
  header.writeUInt32BE(crc32(payload), 8);
  return Buffer.concat([header, payload]);
}

export interface DecodedJournal {
  batches: JournalOp[][];
  /** Bytes up to the end of the last whole frame; what follows is a torn tail. */
  validBytes: number;
}

export function decodeJournal(buf: Buffer): DecodedJournal {
  const batches: JournalOp[][] = [];
  let at = 0;
  while (buf.length - at >= HEADER_BYTES) {
    if (buf.readUInt32BE(at) !== MAGIC) break;
    const length = buf.readUInt32BE(at + 4);
    if (length > MAX_FRAME_BYTES || at + HEADER_BYTES + length > buf.length) break;
    const payload = buf.subarray(at + HEADER_BYTES, at + HEADER_BYTES + length);
    if (crc32(payload) !== buf.readUInt32BE(at + 8)) break;
    let ops: unknown;
    try {
      ops = JSON.parse(payload.toString('utf8'));
    } catch {
      break;
    }
    if (!Array.isArray(ops)) break;
    batches.push(ops as JournalOp[]);
    at += HEADER_BYTES + length;
  }
  return { batches, validBytes: at };
}

export interface RecordJournalOptions {
  file: string;
  fs: StoreFs;
}

/** The open journal file; callers serialise append() and reset() (the store commits one batch at a time). */
export class RecordJournal {
  private readonly file: string;
  private readonly fs: StoreFs;
  private fd: number | undefined;
  private length = 0;
  /**
   * A failed append could not be cut back: bytes of unknown shape (a torn frame, or a whole one)
   * follow `length` until a cut succeeds. A frame appended after a torn one would never load.
   */
  private tailUnknown = false;

  constructor(options: RecordJournalOptions) {
    this.file = options.file;
    this.fs = options.fs;
  }

  get path(): string {
    return this.file;
  }

  /** Bytes of whole frames in the file. */
  get size(): number {
    return this.length;
  }

  /** Opens (creating) the file and returns the batches it holds; a torn tail is cut off durably. */
  async open(): Promise<{ batches: JournalOp[][]; tornBytes: number }> {
    let bytes: Buffer;
    try {
      bytes = await this.fs.readFile(this.file);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      bytes = Buffer.alloc(0);
    }
    const { batches, validBytes } = decodeJournal(bytes);
    this.fd = await this.fs.openSyncedAppend(this.file, 0o600);
    this.length = validBytes;
    const tornBytes = bytes.length - validBytes;
    // Appends after a torn tail would be unreachable on the next load.
    if (tornBytes > 0) await this.cutTo(validBytes);
    return { batches, tornBytes };
  }

  /**
   * Appends one batch and syncs it; on failure the file is cut back to what it held (and it
   * throws). A precondition (the free-space check, given the frame's size) runs before the write:
   * when it fails, nothing is written and its error is thrown.
   */
  async append(ops: JournalOp[], precondition?: (frameBytes: number) => Promise<void>): Promise<void> {
    const fd = this.openFd();
    if (this.tailUnknown) {
      await this.cutTo(this.length).catch((err: unknown) => {
        throw new Error(`an earlier failed batch is still at the end of ${this.file} and cannot be cut off, so no batch is written after it: ${describeError(err)}`, { cause: err });
      });
    }
    const before = this.length;
    const frame = encodeBatch(ops);
    await precondition?.(frame.length);
    try {
      await this.fs.appendSynced(fd, frame);
    } catch (err) {
      // A frame that reached the disk while its caller is told it failed would come back on load.
      await this.cutTo(before).catch((cutErr: unknown) => {
        this.tailUnknown = true;
        throw new JournalUndoError(err, cutErr);
      });
      throw err;
    }
    this.length = before + frame.length;
  }

  /** Empties the journal durably: only once every change in it is durable elsewhere. */
  async reset(): Promise<void> {
    await this.cutTo(0);
  }

  async close(): Promise<void> {
    if (this.fd === undefined) return;
    const fd = this.fd;
    this.fd = undefined;
    await this.fs.close(fd);
  }

  private async cutTo(length: number): Promise<void> {
    const fd = this.openFd();
    await this.fs.ftruncate(fd, length);
    await this.fs.fdatasync(fd);
    this.length = length;
    this.tailUnknown = false;
  }

  private openFd(): number {
    if (this.fd === undefined) throw new Error(`journal ${this.file} is not open`);
    return this.fd;
  }
}

/** An append failed and cutting the frame back failed too: the batch may or may not be on disk. */
export class JournalUndoError extends Error {
  constructor(readonly appendError: unknown, readonly undoError: unknown) {
    super('cannot cut a failed batch off the journal');
  }
}
