import { promises as fs } from 'node:fs';
import path from 'node:path';
import type { Logger } from '../logging/logger.js';
import { describeError } from '../machine/errors.js';
import { decodeFrames } from './frame.js';

// The journal's folder: append-only segment files named by the sequence of their first entry, so
// compaction deletes whole files (oldest first) and never rewrites one in place.

const NAME = /^segment-(\d{20})\.log$/;
const fileName = (firstSequence: number) => `segment-${String(firstSequence).padStart(20, '0')}.log`;

export interface LoadedSegment {
  firstSequence: number;
  payloads: Buffer[];
}

export class SegmentFiles {
  private active: fs.FileHandle | undefined;
  private activeFirst = 0;
  /** Bytes of whole frames in the active segment: a failed append is cut back to it. */
  private activeBytes = 0;

  constructor(
    private readonly dir: string,
    private readonly logger: Logger,
  ) {}

  /** Reads every segment, oldest first; a torn tail is cut off so later appends follow whole frames. */
  async load(): Promise<LoadedSegment[]> {
    await fs.mkdir(this.dir, { recursive: true, mode: 0o750 });
    const firsts = (await fs.readdir(this.dir))
      .map((f) => NAME.exec(f))
      .filter((m): m is RegExpExecArray => m !== null)
      .map((m) => Number(m[1]))
      .sort((a, b) => a - b);
    const segments: LoadedSegment[] = [];
    for (const first of firsts) {
      const file = path.join(this.dir, fileName(first));
      const data = await fs.readFile(file);
      const { payloads, validBytes } = decodeFrames(data);
      if (validBytes < data.length) {
        this.logger.warn('event journal: dropped a torn or corrupt tail', { file, bytes: data.length - validBytes });
        await fs.truncate(file, validBytes);
      }
      segments.push({ firstSequence: first, payloads });
    }
    return segments;
  }

  /** Makes `firstSequence`'s segment the one appends go to, creating it (durably) if new. */
  async activate(firstSequence: number): Promise<void> {
    if (this.active && this.activeFirst === firstSequence) return;
    await this.active?.close();
    this.active = await fs.open(path.join(this.dir, fileName(firstSequence)), 'a', 0o640);
    this.activeFirst = firstSequence;
    this.activeBytes = (await this.active.stat()).size;
    await this.syncDir();
  }

  /**
   * Appends whole frames to the active segment; with `sync`, waits until they are on disk (else
   * sync() does that later). A failed append is cut back so the next one follows whole frames.
   */
  async append(frames: Buffer, sync = true): Promise<void> {
    const active = this.active;
    if (!active) throw new Error('event journal: no active segment');
    const before = this.activeBytes;
    try {
      await active.write(frames);
      if (sync) await active.datasync();
    } catch (err) {
      await active.truncate(before).catch((cutErr: unknown) =>
        this.logger.error('event journal: cannot cut a failed append off its segment; the events after it are lost at the next load', { error: describeError(cutErr) }));
      throw err;
    }
    this.activeBytes = before + frames.length;
  }

  /** Makes every append to the active segment durable. */
  async sync(): Promise<void> {
    await this.active?.datasync();
  }

  async remove(firstSequence: number): Promise<void> {
    await fs.rm(path.join(this.dir, fileName(firstSequence)), { force: true });
  }

  /** After removals and creations, so a crash cannot bring a deleted segment back in a gap. */
  async syncDir(): Promise<void> {
    const dir = await fs.open(this.dir, 'r');
    try {
      await dir.sync();
    } finally {
      await dir.close();
    }
  }

  async close(): Promise<void> {
    await this.active?.close();
    this.active = undefined;
  }
}
