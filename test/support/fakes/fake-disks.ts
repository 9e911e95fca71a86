import type { DiskProvisioner } from '../../../src/hypervisor/port.js';

// Records disk work instead of running qemu-img, for unit tests.

export type FakeDiskOp = 'createDisk' | 'ensureDir' | 'removePath' | 'fileExists' | 'renameFile';

export class FakeDiskProvisioner implements DiskProvisioner {
  /** Files that exist now (created and not removed since). */
  readonly created = new Set<string>();
  /** Every path removePath was asked to remove. */
  readonly removed = new Set<string>();
  /** Directories ensureDir was asked for. */
  readonly dirs = new Set<string>();
  readonly calls: { op: FakeDiskOp; path: string; to?: string; backingImage?: string; sizeGiB?: number }[] = [];
  private readonly failures = new Map<FakeDiskOp, unknown[]>();

  /** Makes the next call of op reject with error (queued: several calls fail in order). */
  failNext(op: FakeDiskOp, error: unknown): void {
    this.failures.set(op, [...(this.failures.get(op) ?? []), error]);
  }

  async createDisk(file: string, opts: { backingImage?: string; sizeGiB?: number }): Promise<void> {
    this.calls.push({ op: 'createDisk', path: file, ...opts });
    this.fail('createDisk');
    this.created.add(file);
  }

  async ensureDir(path: string): Promise<void> {
    this.calls.push({ op: 'ensureDir', path });
    this.fail('ensureDir');
    this.dirs.add(path);
  }

  async removePath(path: string): Promise<void> {
    this.calls.push({ op: 'removePath', path });
    this.fail('removePath');
    this.removed.add(path);
    // Removing a directory takes the files under it too.
    for (const file of this.created) if (file === path || file.startsWith(`${path}/`)) this.created.delete(file);
  }

  /** A file that appeared outside the provisioner (e.g. one libvirt wrote at a save). */
  putFile(path: string): void {
    this.created.add(path);
  }

  async fileExists(path: string): Promise<boolean> {
    this.calls.push({ op: 'fileExists', path });
    this.fail('fileExists');
    return this.created.has(path);
  }

  async renameFile(from: string, to: string): Promise<void> {
    this.calls.push({ op: 'renameFile', path: from, to });
    this.fail('renameFile');
    if (!this.created.delete(from)) throw new Error(`ENOENT: no such file, rename '${from}' -> '${to}'`);
    this.created.add(to);
  }

  private fail(op: FakeDiskOp): void {
    const queued = this.failures.get(op);
    if (queued?.length) throw queued.shift();
  }
}
