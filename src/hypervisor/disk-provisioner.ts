import { constants, promises as fs } from 'node:fs';
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { AgentError } from '../machine/errors.js';
import type { DiskProvisioner } from './port.js';
import { QemuImg, type QemuImgOptions } from './qemu-img.js';

// Machine disks are qcow2 files made by qemu-img: an overlay backed by an image, or an empty disk.
// The agent runs as root in folders a restored backup or a hand edit may have filled with links:
// nothing here follows a symbolic link it did not make, and deletion stays inside its folder.

export type { QemuImgOptions } from './qemu-img.js';

const GUEST_DIR_MODE = 0o711;
// A machine folder holds disks and a serial log; anything deeper was not made by the agent.
const MAX_REMOVE_DEPTH = 4;

const unsafePath = (file: string, why: string) => new AgentError('StorageFailure', `refusing ${file}: ${why}`);

export class QemuImgDiskProvisioner implements DiskProvisioner {
  private readonly qemuImg: QemuImg;

  constructor(opts: QemuImgOptions = {}) {
    this.qemuImg = new QemuImg(opts);
  }

  async createDisk(file: string, opts: { backingImage?: string; sizeGiB?: number }): Promise<void> {
    // Idempotent: a retry after a crash keeps a disk that is there, but never a link or a device.
    const existing = await lstatOrUndefined(file);
    if (existing) {
      if (!existing.isFile()) throw unsafePath(file, 'it exists and is not a regular file');
      return;
    }
    if (opts.backingImage === undefined && opts.sizeGiB === undefined) {
      throw new Error(`disk ${file} needs a backing image or a size`);
    }
    await this.ensureDir(path.dirname(file));
    const args = ['create', '-q', '-f', 'qcow2'];
    if (opts.backingImage !== undefined) {
      args.push('-b', opts.backingImage, '-F', await this.formatOf(opts.backingImage));
    }
    // An unguessable temporary name, claimed with O_EXCL|O_NOFOLLOW before qemu-img writes to it,
    // then renamed (which replaces a name, never follows it): a crash never leaves a half-made disk,
    // and a link planted at the temporary path is refused instead of written through.
    const tmp = `${file}.tmp-${randomBytes(8).toString('hex')}`;
    await (await fs.open(tmp, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600)).close();
    args.push(tmp);
    if (opts.sizeGiB !== undefined) args.push(`${opts.sizeGiB}G`);
    try {
      await this.qemuImg.run(args);
      await fs.rename(tmp, file);
    } catch (err) {
      await fs.unlink(tmp).catch(() => undefined);
      throw err;
    }
  }

  async ensureDir(dir: string): Promise<void> {
    const parent = path.dirname(dir);
    await fs.mkdir(path.dirname(parent), { recursive: true });
    await makeRealDir(parent);
    await makeRealDir(dir);
    await refuseForeignEntries(dir);
    // qemu runs as another user (libvirt-qemu) and must traverse guests/ and guests/<name>/ to
    // its disks and serial log (libvirt chowns the files, not their folders). 0711 lets it pass
    // without listing; chmod because the unit's UMask would strip the x bit from mkdir's mode.
    await chmodDirNoFollow(dir, GUEST_DIR_MODE);
    await chmodDirNoFollow(parent, GUEST_DIR_MODE).catch(() => undefined);
  }

  /** Removes a machine's file or folder; a link is unlinked, never followed. Missing is done. */
  async removePath(target: string): Promise<void> {
    const parent = await lstatOrUndefined(path.dirname(target));
    if (parent === undefined) return;
    if (!parent.isDirectory()) throw unsafePath(path.dirname(target), 'it is not a real directory (a symbolic link?)');
    await removeTree(target, MAX_REMOVE_DEPTH);
  }

  async fileExists(file: string): Promise<boolean> {
    return (await lstatOrUndefined(file))?.isFile() ?? false;
  }

  async renameFile(from: string, to: string): Promise<void> {
    if (path.dirname(from) !== path.dirname(to)) throw unsafePath(to, 'a rename must stay inside its folder');
    const parent = await lstatOrUndefined(path.dirname(from));
    if (!parent?.isDirectory()) throw unsafePath(path.dirname(from), 'it is not a real directory (a symbolic link?)');
    const stats = await lstatOrUndefined(from);
    if (stats && !stats.isFile()) throw unsafePath(from, 'it is not a regular file');
    await fs.rename(from, to);
  }

  /** The image's format, stated to qemu-img so it never probes (-F is required for overlays). */
  private async formatOf(image: string): Promise<string> {
    // --force-share: running guests hold the image open as their backing file.
    const out = await this.qemuImg.run(['info', '--force-share', '--output=json', image]);
    let format: unknown;
    try {
      format = (JSON.parse(out) as { format?: unknown }).format;
    } catch {
      throw new Error(`qemu-img info ${image}: unreadable output`);
    }
    if (typeof format !== 'string' || !/^[a-z0-9_-]+$/.test(format)) throw new Error(`qemu-img info ${image}: no format`);
    return format;
  }
}

/** mkdir without following: an existing entry must be a directory itself, not a link to one. */
async function makeRealDir(dir: string): Promise<void> {
  try {
    await fs.mkdir(dir, { mode: GUEST_DIR_MODE });
    return;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  }
  const stats = await fs.lstat(dir);
  if (stats.isSymbolicLink()) throw unsafePath(dir, 'it is a symbolic link');
  if (!stats.isDirectory()) throw unsafePath(dir, 'it is not a directory');
}

/**
 * The agent makes only regular files in a machine folder; anything else (a link at serial.log,
 * which libvirt would write through, or at a disk path) was planted, and the folder is refused.
 */
async function refuseForeignEntries(dir: string): Promise<void> {
  for (const entry of await fs.readdir(dir, { withFileTypes: true })) {
    if (!entry.isFile()) throw unsafePath(path.join(dir, entry.name), 'the agent made no such entry (not a regular file)');
  }
}

/** chmod through a descriptor opened with O_NOFOLLOW, so a link swapped in is never changed. */
async function chmodDirNoFollow(dir: string, mode: number): Promise<void> {
  const handle = await fs.open(dir, constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ELOOP' || err.code === 'ENOTDIR') throw unsafePath(dir, 'it is not a real directory (a symbolic link?)');
    throw err;
  });
  try {
    await handle.chmod(mode);
  } finally {
    await handle.close();
  }
}

/** rm -r that unlinks links instead of following them and stops at a depth the agent never makes. */
async function removeTree(target: string, depthLeft: number): Promise<void> {
  const stats = await lstatOrUndefined(target);
  if (stats === undefined) return;
  if (!stats.isDirectory()) {
    await fs.unlink(target).catch(ignoreMissing);
    return;
  }
  if (depthLeft === 0) throw unsafePath(target, 'nested deeper than any folder the agent creates');
  for (const entry of await fs.readdir(target)) await removeTree(path.join(target, entry), depthLeft - 1);
  await fs.rmdir(target).catch(ignoreMissing);
}

async function lstatOrUndefined(file: string) {
  try {
    return await fs.lstat(file);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
}

function ignoreMissing(err: NodeJS.ErrnoException): void {
  if (err.code !== 'ENOENT') throw err;
}
