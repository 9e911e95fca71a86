import fs from 'node:fs';
import { promisify } from 'node:util';

// The file operations the store uses, on plain fds so a test can swap any single one (write,
// fsync, rename...) for one that fails with ENOSPC or EIO.

export interface StoreFs {
  mkdir(path: string, mode: number): Promise<void>;
  readdir(path: string): Promise<string[]>;
  readFile(path: string): Promise<string>;
  open(path: string, flags: string, mode?: number): Promise<number>;
  /** Writes all of data (loops on short writes). */
  write(fd: number, data: Buffer): Promise<void>;
  fsync(fd: number): Promise<void>;
  close(fd: number): Promise<void>;
  rename(from: string, to: string): Promise<void>;
  unlink(path: string): Promise<void>;
}

const writeFd = promisify(fs.write);
// Only load() reads, once at start-up before the bus name is taken: a synchronous read skips two
// thread-pool round trips per file, which is most of the time with 10,000 small records.
const readFileNow = async (path: string) => fs.readFileSync(path, 'utf8');

export const nodeStoreFs: StoreFs = {
  async mkdir(path, mode) {
    await fs.promises.mkdir(path, { recursive: true, mode });
  },
  readdir: (path) => fs.promises.readdir(path),
  readFile: readFileNow,
  open: promisify(fs.open) as StoreFs['open'],
  async write(fd, data) {
    for (let off = 0; off < data.length; ) {
      off += (await writeFd(fd, data, off, data.length - off)).bytesWritten;
    }
  },
  fsync: promisify(fs.fsync),
  close: promisify(fs.close),
  rename: (from, to) => fs.promises.rename(from, to),
  unlink: (path) => fs.promises.unlink(path),
};
