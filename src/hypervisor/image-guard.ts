import { promises as fs, type Stats } from 'node:fs';
import path from 'node:path';
import { Semaphore } from '../lifecycle/semaphore.js';
import { invalidSpec } from '../machine/errors.js';
import type { MachineSpec } from '../machine/spec.js';
import type { QemuImg } from './qemu-img.js';

// Image paths name files root's qemu-img and qemu will open. The spec check (machine/spec.ts) only
// sees text; this one looks at the file system: symlinks resolved, only regular files, and every
// member of a disk image's backing chain inside the image directories.

/** The parts of a spec that name files. */
export type ImagePaths = Partial<Pick<MachineSpec, 'boot' | 'disks'>>;

/** Checks a spec's image paths against the file system; throws InvalidSpec naming the field. */
export interface ImageChecker {
  checkSpec(spec: ImagePaths): Promise<void>;
}

/** What the guard needs to know of one image file (qemu-img info without following its backing). */
export interface ImageInfo {
  format: string;
  /** The backing reference as stored in the image; undefined without one. */
  backingFilename?: string;
  /** That reference resolved by qemu-img (relative names against the image's folder). */
  fullBackingFilename?: string;
  backingFormat?: string;
  /** A qcow2 external data file: another file the image reads from. */
  dataFile?: string;
}

/** Inspects one file of a known format (or probes it), never opening its backing file. */
export type ImageInspector = (file: string, format: string | undefined) => Promise<ImageInfo>;

export interface ImageGuardOptions {
  imageDirectories: readonly string[];
  inspect: ImageInspector;
  /** Longest backing chain accepted, the image itself included. */
  maxChainDepth?: number;
  /** How many inspections may run at once across all callers. */
  parallelism?: number;
}

const ALLOWED_FORMATS = new Set(['raw', 'qcow2']);
// "json:{...}", "nbd://", "http://", "file:": anything qemu would read as a protocol, not a path.
const PROTOCOL_PREFIX = /^[A-Za-z0-9+._-]*:/;

export class ImageGuard implements ImageChecker {
  private readonly maxChainDepth: number;
  private readonly slots: Semaphore;

  constructor(private readonly o: ImageGuardOptions) {
    this.maxChainDepth = o.maxChainDepth ?? 8;
    this.slots = new Semaphore(o.parallelism ?? 2);
  }

  async checkSpec(spec: ImagePaths): Promise<void> {
    const dirs = await this.resolvedImageDirs();
    if (spec.boot) {
      await this.resolveFile(spec.boot.kernel, 'boot.kernel', 'it', dirs);
      if (spec.boot.initrd !== undefined) await this.resolveFile(spec.boot.initrd, 'boot.initrd', 'it', dirs);
    }
    for (const [i, disk] of (spec.disks ?? []).entries()) {
      if (disk.image !== undefined) await this.checkChain(disk.image, `disks[${i}].image`, dirs);
    }
  }

  /** Walks the chain one member at a time: a member is inspected only after its path was accepted. */
  private async checkChain(image: string, field: string, dirs: string[]): Promise<void> {
    let file = await this.resolveFile(image, field, 'it', dirs);
    let format: string | undefined;
    const seen = new Set<string>();
    for (let depth = 0; ; depth++) {
      const what = depth === 0 ? 'the image' : `backing file ${depth}`;
      if (depth >= this.maxChainDepth) throw invalidSpec(field, `backing chain is longer than ${this.maxChainDepth} images`);
      seen.add(file);
      const info = await this.slots.run(() => this.o.inspect(file, format)).catch(() => {
        throw invalidSpec(field, `${what} is not a readable disk image`);
      });
      if (!ALLOWED_FORMATS.has(info.format)) throw invalidSpec(field, `${what} has a format that is not allowed (only raw and qcow2)`);
      if (info.dataFile !== undefined) throw invalidSpec(field, `${what} uses an external data file, which is not allowed`);
      if (info.backingFilename === undefined) return;
      const next = depth + 1;
      if (PROTOCOL_PREFIX.test(info.backingFilename)) {
        throw invalidSpec(field, `backing file ${next} is not a plain file path (protocols and json: are not allowed)`);
      }
      if (info.backingFormat !== undefined && !ALLOWED_FORMATS.has(info.backingFormat)) {
        throw invalidSpec(field, `backing file ${next} has a format that is not allowed (only raw and qcow2)`);
      }
      const stated = path.resolve(path.dirname(file), info.fullBackingFilename ?? info.backingFilename);
      file = await this.resolveFile(stated, field, `backing file ${next}`, dirs);
      if (seen.has(file)) throw invalidSpec(field, `backing file ${next} makes the chain loop`);
      format = info.backingFormat;
    }
  }

  /** The real path of a regular file inside an image directory, or InvalidSpec. Opens nothing. */
  private async resolveFile(given: string, field: string, what: string, dirs: string[]): Promise<string> {
    let real: string;
    try {
      real = await fs.realpath(given);
    } catch (err) {
      throw invalidSpec(field, `${what} cannot be resolved (${errorCode(err)})`);
    }
    if (!dirs.some((dir) => isInside(real, dir))) throw invalidSpec(field, `${what} resolves to a path outside the image directories`);
    let stats: Stats;
    try {
      stats = await fs.stat(real);
    } catch (err) {
      throw invalidSpec(field, `${what} cannot be examined (${errorCode(err)})`);
    }
    if (!stats.isFile()) throw invalidSpec(field, `${what} is a ${fileKind(stats)}, not a regular file`);
    return real;
  }

  /** Image directories with their own links resolved; one that does not exist holds no images. */
  private async resolvedImageDirs(): Promise<string[]> {
    const dirs = await Promise.all(this.o.imageDirectories.map((dir) => fs.realpath(dir).catch(() => undefined)));
    return dirs.filter((dir): dir is string => dir !== undefined);
  }
}

const isInside = (file: string, dir: string) => file.startsWith(dir.endsWith('/') ? dir : `${dir}/`);

const errorCode = (err: unknown) => (err as NodeJS.ErrnoException).code ?? 'error';

function fileKind(stats: Stats): string {
  if (stats.isDirectory()) return 'directory';
  if (stats.isFIFO()) return 'FIFO';
  if (stats.isSocket()) return 'socket';
  if (stats.isBlockDevice() || stats.isCharacterDevice()) return 'device';
  return 'special file';
}

/** The real inspector: `qemu-img info` on one file, its backing left closed (no --backing-chain). */
export function qemuImgInspector(qemuImg: QemuImg): ImageInspector {
  return async (file, format) => {
    // -U: running guests hold images open as their backing files.
    const args = ['info', '--output=json', '-U', ...(format !== undefined ? ['-f', format] : []), file];
    const out = JSON.parse(await qemuImg.run(args)) as Record<string, unknown>;
    const str = (v: unknown) => (typeof v === 'string' ? v : undefined);
    const specific = out['format-specific'] as { data?: Record<string, unknown> } | undefined;
    return {
      format: str(out.format) ?? '',
      backingFilename: str(out['backing-filename']),
      fullBackingFilename: str(out['full-backing-filename']),
      backingFormat: str(out['backing-filename-format']),
      dataFile: str(specific?.data?.['data-file']),
    };
  };
}
