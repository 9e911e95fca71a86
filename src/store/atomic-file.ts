import { randomBytes } from 'node:crypto';
import path from 'node:path';
import type { StoreFs } from './store-fs.js';

// One small file replaced whole, durably: temp file, fsync, rename, fsync of the folder. A crash
// leaves the old file or the new one, never a torn one (and at worst a stray temp file).

/** Temp files this helper leaves behind only when the process dies mid-write. */
export const ATOMIC_TEMP_FILE = /\.tmp-[0-9a-f]{12}$/;

export async function writeFileAtomic(fs: StoreFs, file: string, data: string | Buffer, mode = 0o600): Promise<void> {
  const temp = `${file}.tmp-${randomBytes(6).toString('hex')}`;
  let fd: number | undefined;
  try {
    fd = await fs.open(temp, 'wx', mode);
    await fs.write(fd, typeof data === 'string' ? Buffer.from(data) : data);
    await fs.fsync(fd);
    const closing = fd;
    fd = undefined;
    await fs.close(closing);
    await fs.rename(temp, file);
  } catch (err) {
    if (fd !== undefined) await fs.close(fd).catch(() => undefined);
    await fs.unlink(temp).catch(() => undefined);
    throw err;
  }
  await syncDirectory(fs, path.dirname(file));
}

/** Makes renames and unlinks in dir durable. */
export async function syncDirectory(fs: StoreFs, dir: string): Promise<void> {
  const fd = await fs.open(dir, 'r');
  try {
    await fs.fsync(fd);
  } finally {
    await fs.close(fd).catch(() => undefined);
  }
}
