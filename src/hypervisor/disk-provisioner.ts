import { execFile } from 'node:child_process';
import { promises as fs } from 'node:fs';
import path from 'node:path';
import type { DiskProvisioner } from './port.js';

// Machine disks are qcow2 files made by qemu-img: an overlay backed by an image, or an empty disk.

export interface QemuImgOptions {
  /** qemu-img binary; PATH lookup by default. */
  qemuImg?: string;
  /** Upper bound for one qemu-img run; it is killed after this. */
  timeoutMs?: number;
}

const GUEST_DIR_MODE = 0o711;

export class QemuImgDiskProvisioner implements DiskProvisioner {
  private readonly qemuImg: string;
  private readonly timeoutMs: number;

  constructor(opts: QemuImgOptions = {}) {
    this.qemuImg = opts.qemuImg ?? 'qemu-img';
    this.timeoutMs = opts.timeoutMs ?? 60_000;
  }

  async createDisk(file: string, opts: { backingImage?: string; sizeGiB?: number }): Promise<void> {
    if (await exists(file)) return; // idempotent: a retry after a crash keeps what is there
    if (opts.backingImage === undefined && opts.sizeGiB === undefined) {
      throw new Error(`disk ${file} needs a backing image or a size`);
    }
    await this.ensureDir(path.dirname(file));
    const args = ['create', '-q', '-f', 'qcow2'];
    if (opts.backingImage !== undefined) {
      args.push('-b', opts.backingImage, '-F', await this.formatOf(opts.backingImage));
    }
    // Created under a temporary name and renamed, so a crash never leaves a half-made disk to keep.
    const tmp = `${file}.tmp-${process.pid}`;
    args.push(tmp);
    if (opts.sizeGiB !== undefined) args.push(`${opts.sizeGiB}G`);
    try {
      await this.run(args);
      await fs.rename(tmp, file);
    } catch (err) {
      await fs.rm(tmp, { force: true });
      throw err;
    }
  }

  async ensureDir(dir: string): Promise<void> {
    await fs.mkdir(dir, { recursive: true, mode: GUEST_DIR_MODE });
    // qemu runs as another user (libvirt-qemu) and must traverse guests/ and guests/<name>/ to
    // its disks and serial log (libvirt chowns the files, not their folders). 0711 lets it pass
    // without listing; chmod because the unit's UMask would strip the x bit from mkdir's mode.
    await fs.chmod(dir, GUEST_DIR_MODE);
    await fs.chmod(path.dirname(dir), GUEST_DIR_MODE).catch(() => undefined);
  }

  async removePath(target: string): Promise<void> {
    await fs.rm(target, { recursive: true, force: true });
  }

  /** The image's format, stated to qemu-img so it never probes (-F is required for overlays). */
  private async formatOf(image: string): Promise<string> {
    // --force-share: running guests hold the image open as their backing file.
    const out = await this.run(['info', '--force-share', '--output=json', image]);
    let format: unknown;
    try {
      format = (JSON.parse(out) as { format?: unknown }).format;
    } catch {
      throw new Error(`qemu-img info ${image}: unreadable output`);
    }
    if (typeof format !== 'string' || !/^[a-z0-9_-]+$/.test(format)) throw new Error(`qemu-img info ${image}: no format`);
    return format;
  }

  private run(args: string[]): Promise<string> {
    return new Promise((resolve, reject) => {
      execFile(this.qemuImg, args, { timeout: this.timeoutMs, killSignal: 'SIGKILL', maxBuffer: 1024 * 1024 }, (err, stdout, stderr) => {
        if (!err) return resolve(stdout);
        const why = err.killed ? `timed out after ${this.timeoutMs} ms` : String(stderr).trim().split('\n')[0] || err.message;
        reject(new Error(`qemu-img ${args[0]} failed: ${why}`, { cause: err }));
      });
    });
  }
}

async function exists(file: string): Promise<boolean> {
  try {
    await fs.lstat(file);
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return false;
    throw err;
  }
}
