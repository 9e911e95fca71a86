import type { Logger } from '../logging/logger.js';
import { describeError } from '../machine/errors.js';

// Starts parts one after another and stops the started ones in reverse, the way a daemon must:
// a part is stopped only if it started, and one part failing to stop does not keep the others up.

export interface Part {
  /** Names the part in failure lines ("stop failed: D-Bus service: ..."). */
  name: string;
  start(): Promise<void> | void;
  /** Absent when starting the part leaves nothing to undo. */
  stop?(): Promise<void> | void;
}

export class PartSequence {
  private readonly started: Part[] = [];
  private next = 0;

  constructor(private readonly parts: readonly Part[], private readonly logger: Logger) {}

  /**
   * Starts the parts not started yet, checking the signal before each; false when it aborted.
   * A part that throws is not counted as started, and the error goes to the caller.
   */
  async start(signal: AbortSignal): Promise<boolean> {
    while (this.next < this.parts.length) {
      if (signal.aborted) return false;
      const part = this.parts[this.next++]!;
      await part.start();
      this.started.push(part);
    }
    return !signal.aborted;
  }

  /** Stops every started part in reverse order, each on its own; true when all stopped cleanly. */
  async stop(): Promise<boolean> {
    let clean = true;
    // Nothing starts after a stop: the sequence is spent.
    this.next = this.parts.length;
    for (let part = this.started.pop(); part; part = this.started.pop()) {
      try {
        await part.stop?.();
      } catch (err) {
        clean = false;
        this.logger.error(`stop failed: ${part.name}: ${describeError(err)}`);
      }
    }
    return clean;
  }
}
