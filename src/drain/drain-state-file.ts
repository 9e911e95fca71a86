import path from 'node:path';
import { AgentError, describeError } from '../machine/errors.js';
import { nodeStoreFs, type StoreFs } from '../store/store-fs.js';

// Whether the host is drained, on disk (drain.json), so a restart of the agent or of the host keeps
// it drained. Written as the machine records are: temp file, fsync, rename, directory fsync.

/** What the file holds: "draining" until the stop run ends, then "drained". */
export interface PersistedDrain {
  state: 'draining' | 'drained';
  /** When the drain was asked for, milliseconds since the epoch. */
  since: number;
  /** Set when the file could not be read or parsed: why (it then counts as drained). */
  damaged?: string;
}

const MAX_BYTES = 4096;

export class DrainStateFile {
  constructor(private readonly file: string, private readonly fs: StoreFs = nodeStoreFs) {}

  /** The persisted drain, or undefined when there is none. A damaged file counts as drained: keeping guests off is the safe side. */
  async read(): Promise<PersistedDrain | undefined> {
    if ((await this.fs.entryKind(this.file)) === 'missing') return undefined;
    let text: string;
    try {
      text = await this.fs.readRegularFile(this.file, MAX_BYTES);
    } catch (err) {
      return { state: 'drained', since: 0, damaged: describeError(err) };
    }
    return parse(text) ?? { state: 'drained', since: 0, damaged: 'not a drain state (JSON with "state" and "since")' };
  }

  /** Durable when it resolves; StorageFailure (nothing changed) when it cannot be. */
  async write(value: PersistedDrain): Promise<void> {
    const dir = path.dirname(this.file);
    const temp = `${this.file}.tmp`;
    try {
      await this.fs.mkdir(dir, 0o700);
      const fd = await this.fs.open(temp, 'w', 0o600);
      try {
        await this.fs.write(fd, Buffer.from(`${JSON.stringify(value)}\n`));
        await this.fs.fsync(fd);
      } finally {
        await this.fs.close(fd);
      }
      await this.fs.rename(temp, this.file);
      await this.syncDir(dir);
    } catch (err) {
      await this.fs.unlink(temp).catch(() => undefined);
      throw new AgentError('StorageFailure', `cannot write ${this.file}: ${describeError(err)}`, { cause: err });
    }
  }

  /** Gone and durable when it resolves; a missing file is fine. */
  async remove(): Promise<void> {
    try {
      await this.fs.unlink(this.file);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
      throw new AgentError('StorageFailure', `cannot remove ${this.file}: ${describeError(err)}`, { cause: err });
    }
    await this.syncDir(path.dirname(this.file)).catch((err: unknown) => {
      throw new AgentError('StorageFailure', `cannot sync ${path.dirname(this.file)}: ${describeError(err)}`, { cause: err });
    });
  }

  private async syncDir(dir: string): Promise<void> {
    const fd = await this.fs.open(dir, 'r');
    try {
      await this.fs.fsync(fd);
    } finally {
      await this.fs.close(fd);
    }
  }
}

function parse(text: string): PersistedDrain | undefined {
  try {
    const v = JSON.parse(text) as Partial<PersistedDrain>;
    if ((v.state === 'draining' || v.state === 'drained') && typeof v.since === 'number') return { state: v.state, since: v.since };
  } catch {
    // not JSON: the caller treats it as damaged
  }
  return undefined;
}
