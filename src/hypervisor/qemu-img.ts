import { execFile } from 'node:child_process';
import type { Logger } from '../logging/logger.js';
import { silentLogger } from '../logging/logger.js';

// Runs qemu-img with a deadline. Its stderr can quote what it read (a backing file name, bytes of a
// file it was pointed at), and a failure ends up in status.message for every bus reader: the error
// carries only a fixed phrase, the raw stderr goes to the debug log, capped.

export interface QemuImgOptions {
  /** qemu-img binary; PATH lookup by default. */
  qemuImg?: string;
  /** Upper bound for one qemu-img run; it is killed after this. */
  timeoutMs?: number;
  logger?: Logger;
}

const MAX_LOGGED_STDERR = 2048;
const MAX_STDOUT = 1024 * 1024;

// Checked in order: the first phrase found in stderr is the summary.
const KNOWN_FAILURES = [
  'Could not open backing file',
  'Backing file specified without backing format',
  'Image is not in qcow2 format',
  'Unknown driver',
  'Unknown protocol',
  'No space left on device',
  'Permission denied',
  'No such file or directory',
  'Is a directory',
  'Operation not permitted',
  'Could not open',
  'Invalid',
] as const;

/** The part of a qemu-img failure safe to show anyone: one known phrase, never quoted text. */
export function summariseQemuImgError(stderr: string): string {
  return KNOWN_FAILURES.find((phrase) => stderr.includes(phrase)) ?? 'details in the agent log';
}

export class QemuImg {
  private readonly bin: string;
  readonly timeoutMs: number;
  private readonly logger: Logger;

  constructor(opts: QemuImgOptions = {}) {
    this.bin = opts.qemuImg ?? 'qemu-img';
    this.timeoutMs = opts.timeoutMs ?? 60_000;
    this.logger = opts.logger ?? silentLogger;
  }

  /** Runs `qemu-img args...`; resolves with stdout, rejects with a summarised message. */
  run(args: readonly string[]): Promise<string> {
    const command = args[0] ?? '';
    return new Promise((resolve, reject) => {
      execFile(this.bin, args, { timeout: this.timeoutMs, killSignal: 'SIGKILL', maxBuffer: MAX_STDOUT }, (err, stdout, stderr) => {
        if (!err) return resolve(stdout);
        const raw = String(stderr).trim();
        this.logger.debug(`qemu-img ${command} failed`, { stderr: raw.slice(0, MAX_LOGGED_STDERR) });
        const code = (err as { code?: unknown }).code;
        const exit = typeof code === 'number' ? `exit ${code}` : 'did not run';
        // No cause attached: execFile's error message holds the raw stderr.
        reject(new Error(err.killed ? `qemu-img ${command} timed out after ${this.timeoutMs} ms` : `qemu-img ${command} failed (${exit}): ${summariseQemuImgError(raw)}`));
      });
    });
  }
}
