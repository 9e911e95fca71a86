import fs from 'node:fs';
import { promisify } from 'node:util';

// The file operations the store uses, on plain fds so a test can swap any single one (write,
// fsync, rename...) for one that fails with ENOSPC or EIO.

/** What kind of directory entry a path names, without following a symbolic link. */
export type EntryKind = 'file' | 'directory' | 'symlink' | 'other' | 'missing';

/**
 * Which version of a file a path holds: inode, size, and modification and change times in
 * nanoseconds. Any write, rename onto it, copy over it or chmod gives a new one (the change time
 * cannot be set back by a tool), so an unchanged stamp means unchanged content.
 */
export interface FileStamp {
  /** `ino/size/mtimeNs/ctimeNs`: compared whole. */
  id: string;
}

export interface StoreFs {
  mkdir(path: string, mode: number): Promise<void>;
  readdir(path: string): Promise<string[]>;
  /**
   * Reads a regular file of at most maxBytes. Never follows a symbolic link, never blocks on a
   * FIFO and never reads a device: those throw UnsafeFileError (or ELOOP for a link).
   */
  readRegularFile(path: string, maxBytes: number): Promise<string>;
  /** readRegularFile, with the stamp of the version read. */
  readStampedFile(path: string, maxBytes: number): Promise<{ text: string; stamp: FileStamp }>;
  /** The stamp of a regular file at path (a link is not followed); undefined when missing or not one. */
  stamp(path: string): Promise<FileStamp | undefined>;
  entryKind(path: string): Promise<EntryKind>;
  open(path: string, flags: string, mode?: number): Promise<number>;
  /** Writes all of data (loops on short writes). */
  write(fd: number, data: Buffer): Promise<void>;
  /**
   * Opens (creating) a file to append to with appendSynced: the journal's. On Linux it is opened
   * O_DSYNC, so each write is its own fdatasync: one thread-pool job a batch instead of two.
   */
  openSyncedAppend(path: string, mode: number): Promise<number>;
  /** Appends all of data to a file from openSyncedAppend; durable (data and size) when it resolves. */
  appendSynced(fd: number, data: Buffer): Promise<void>;
  fsync(fd: number): Promise<void>;
  /** Flushes the data (and the size) of an appended file, not its times: the journal's sync. */
  fdatasync(fd: number): Promise<void>;
  /** Cuts a file to length: drops a torn or failed journal tail. */
  ftruncate(fd: number, length: number): Promise<void>;
  /** Whole file as bytes (the journal is binary framed); ENOENT when missing. */
  readFile(path: string): Promise<Buffer>;
  close(fd: number): Promise<void>;
  rename(from: string, to: string): Promise<void>;
  unlink(path: string): Promise<void>;
  /** Bytes an unprivileged writer may still use on the file system holding path (statfs). */
  freeBytes(path: string): Promise<number>;
}

/** A file the store refuses to read; the message is the reason, never the file's content. */
export class UnsafeFileError extends Error {}

const writeFd = promisify(fs.write);
const openFd = promisify(fs.open);

async function writeAll(fd: number, data: Buffer): Promise<void> {
  for (let off = 0; off < data.length; ) {
    off += (await writeFd(fd, data, off, data.length - off)).bytesWritten;
  }
}

function kindOf(st: fs.Stats): EntryKind {
  if (st.isFile()) return 'file';
  if (st.isDirectory()) return 'directory';
  if (st.isSymbolicLink()) return 'symlink';
  return 'other';
}

function describeNonRegular(st: fs.Stats | fs.BigIntStats): string {
  if (st.isDirectory()) return 'a directory';
  if (st.isFIFO()) return 'a FIFO';
  if (st.isCharacterDevice()) return 'a character device';
  if (st.isBlockDevice()) return 'a block device';
  if (st.isSocket()) return 'a socket';
  return 'not a plain file';
}

function stampOf(st: fs.BigIntStats): FileStamp {
  return { id: `${st.ino}/${st.size}/${st.mtimeNs}/${st.ctimeNs}` };
}

// Only load() reads, once at start-up before the bus name is taken: synchronous calls skip the
// thread-pool round trips per file, which are most of the time with 10,000 small records.
function readRegularFileNow(path: string, maxBytes: number): { text: string; stamp: FileStamp } {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
  const fd = fs.openSync(path, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK);
  try {
    const st = fs.fstatSync(fd, { bigint: true });
    if (!st.isFile()) throw new UnsafeFileError(`not a regular file (${describeNonRegular(st)})`);
    if (st.size > maxBytes) throw new UnsafeFileError(`larger than ${maxBytes} bytes (${st.size})`);
    // One byte more than allowed tells a file that grew since fstat from one that did not.
    const buf = Buffer.allocUnsafe(Number(st.size) + 1);
    let length = 0;
    for (let n; length < buf.length && (n = fs.readSync(fd, buf, length, buf.length - length, length)) > 0; ) length += n;
    if (length > maxBytes) throw new UnsafeFileError(`larger than ${maxBytes} bytes`);
    return { text: buf.toString('utf8', 0, length), stamp: stampOf(st) };
  } finally {
    fs.closeSync(fd);
  }
}

export const nodeStoreFs: StoreFs = {
  async mkdir(path, mode) {
    await fs.promises.mkdir(path, { recursive: true, mode });
  },
  readdir: (path) => fs.promises.readdir(path),
  readRegularFile: async (path, maxBytes) => readRegularFileNow(path, maxBytes).text,
  readStampedFile: async (path, maxBytes) => readRegularFileNow(path, maxBytes),
  // Synchronous: load() stamps every record file (as readRegularFileNow reads them), and a write
  // stamps its file right after the rename, before another operation's completion can come between.
  async stamp(path) {
    const st = fs.lstatSync(path, { bigint: true, throwIfNoEntry: false });
    return st?.isFile() ? stampOf(st) : undefined;
  },
  async entryKind(path) {
    try {
      return kindOf(await fs.promises.lstat(path));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return 'missing';
      throw err;
    }
  },
  open: openFd as StoreFs['open'],
  write: writeAll,
  openSyncedAppend: (path, mode) => openFd(path, fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_APPEND | fs.constants.O_DSYNC, mode),
  // O_DSYNC: each write(2) returns once its data and the new size are on the disk.
  appendSynced: writeAll,
  fsync: promisify(fs.fsync),
  fdatasync: promisify(fs.fdatasync),
  ftruncate: promisify(fs.ftruncate) as StoreFs['ftruncate'],
  readFile: (path) => fs.promises.readFile(path),
  close: promisify(fs.close),
  rename: (from, to) => fs.promises.rename(from, to),
  unlink: (path) => fs.promises.unlink(path),
  // Synchronous, as stamp() is: on a local file system statfs answers from its counters without
  // I/O (about 4 us here), while fs.promises.statfs cost the main thread 19 us a call in a loop
  // and about 100 us a batch in a profile of the agent under 8 writers (docs/performance.md). On
  // NFS it is a round trip to the server on the main thread: the state dir is meant to be local.
  async freeBytes(path) {
    const st = fs.statfsSync(path);
    return st.bavail * st.bsize;
  },
};
