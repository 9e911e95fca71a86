import type { Clock, TimerHandle } from '../lifecycle/clock.js';
import { formatCountdown } from './format/time.js';
import type { Io } from './io.js';
import type { AgentEvent, MachineInfo } from './model.js';

// What --wait shows: one line per event; on a terminal also a status line with the seconds left to
// the force stop, redrawn every second by the injected clock.

export interface Progress {
  event(e: AgentEvent): void;
  update(m: Pick<MachineInfo, 'name' | 'state' | 'forceStopAt'>): void;
  /** The final line (success or failure is the caller's business); stops the ticking. */
  finish(line?: string): void;
}

const PHRASES: Record<string, string> = {
  DeletionRequested: 'deletion requested',
  ShutdownRequested: 'shutdown requested',
  ShutdownRetried: 'shutdown retried',
  ShutdownCompleted: 'shutdown completed',
  ForceStopped: 'force-stopped',
  Stopped: 'powered off',
  Started: 'started',
  Created: 'created',
  Deleted: 'deleted',
  CleanupFailed: 'cleanup failed',
  ReconcileFailed: 'reconcile failed',
};

export function describeEvent(e: AgentEvent): string {
  const phrase = PHRASES[e.reason] ?? e.reason;
  return `${e.machine || '(host)'}: ${phrase}${e.message ? `: ${e.message}` : ''}`;
}

export function statusLine(m: Pick<MachineInfo, 'name' | 'state' | 'forceStopAt'>, now: number): string {
  const deadline = m.forceStopAt > 0 ? `, force stop ${formatCountdown(m.forceStopAt, now)}` : '';
  return `${m.name}: ${m.state}${deadline}`;
}

/** Nothing at all (for --json). */
export const silentProgress: Progress = { event() {}, update() {}, finish() {} };

export class TerminalProgress implements Progress {
  private current?: Pick<MachineInfo, 'name' | 'state' | 'forceStopAt'>;
  private shown = false;
  private tick?: TimerHandle;
  private lastState?: string;
  private done = false;

  constructor(private readonly io: Io, private readonly clock: Clock) {}

  event(e: AgentEvent): void {
    if (this.done) return;
    const line = describeEvent(e);
    this.clearStatus();
    this.io.out(`${e.type === 'warning' ? this.io.styles.yellow(line) : line}\n`);
    this.drawStatus();
  }

  update(m: Pick<MachineInfo, 'name' | 'state' | 'forceStopAt'>): void {
    if (this.done) return;
    this.current = { name: m.name, state: m.state, forceStopAt: m.forceStopAt };
    if (this.io.isTTY) {
      this.clearStatus();
      this.drawStatus();
      this.scheduleTick();
    } else if (m.state !== this.lastState) {
      // A log (pipe, file) gets one line per state change instead of a ticking countdown.
      this.io.out(`${statusLine(this.current, this.clock.now())}\n`);
    }
    this.lastState = m.state;
  }

  finish(line?: string): void {
    if (this.done) return;
    this.done = true;
    this.tick?.cancel();
    this.clearStatus();
    if (line) this.io.out(`${line}\n`);
  }

  private scheduleTick(): void {
    this.tick?.cancel();
    this.tick = undefined;
    if (!this.current || this.current.forceStopAt <= 0) return;
    // Redraw at the next whole second before the deadline so the countdown steps evenly.
    const left = this.current.forceStopAt - this.clock.now();
    const delay = left > 0 ? left % 1000 || 1000 : 1000;
    this.tick = this.clock.setTimer(delay, () => {
      this.clearStatus();
      this.drawStatus();
      this.scheduleTick();
    });
  }

  private drawStatus(): void {
    if (!this.io.isTTY || !this.current) return;
    this.io.out(this.io.styles.dim(statusLine(this.current, this.clock.now())));
    this.shown = true;
  }

  private clearStatus(): void {
    if (!this.shown) return;
    this.io.out('\r\x1b[K');
    this.shown = false;
  }
}
