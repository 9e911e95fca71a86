import type { StopRunProgress } from '../hostshutdown/policy-stop-procedure.js';
import { stopStatusLine, TimeoutExtension } from '../hostshutdown/stop-progress.js';
import type { Clock, TimerHandle } from '../lifecycle/clock.js';
import { PeriodicTask } from '../lifecycle/timers.js';
import { isDeleting, type MachineRecord } from '../machine/record.js';
import type { MachineApi, ManagerInfo } from '../service/api.js';
import type { Notifier } from './notifier.js';

// The one-line STATUS= an operator reads in `systemctl status vmkeeperd`.

export interface StatusInputs {
  info: Pick<ManagerInfo, 'state' | 'libvirtConnected'>;
  records: readonly MachineRecord[];
  /** Epoch ms of the last completed sweep, 0 = none yet. */
  lastSweepAt: number;
}

const hhmmss = (ms: number) => new Date(ms).toISOString().slice(11, 19);

/**
 * e.g. "running: 5 machines, 3 running, 1 deleting, 1 powering off; last sweep 16:40:12 UTC".
 * The sweep is shown as a time of day, not "N s ago", so the line only changes when something does.
 */
export function formatStatus(s: StatusInputs): string {
  let running = 0;
  let deleting = 0;
  let poweringOff = 0;
  let failed = 0;
  for (const r of s.records) {
    if (isDeleting(r)) deleting++;
    else if (r.status.state === 'stopping') poweringOff++;
    else if (r.status.state === 'running') running++;
    if (r.status.state === 'error') failed++;
  }
  const state = s.info.state === 'degraded' ? 'degraded (libvirt unreachable, retrying)' : s.info.state;
  const parts = [`${s.records.length} machines`, `${running} running`, `${deleting} deleting`, `${poweringOff} powering off`];
  if (failed) parts.push(`${failed} in error`);
  const sweep = s.lastSweepAt > 0 ? `last sweep ${hhmmss(s.lastSweepAt)} UTC` : 'no sweep yet';
  return `${state}: ${parts.join(', ')}; ${sweep}`;
}

export interface StatusReporterOptions {
  api: MachineApi;
  notifier: Notifier;
  clock: Clock;
  lastSweepAt: () => number;
  /** Coalesces bursts of changes (many machines at once) into one STATUS=. */
  debounceMs?: number;
  /** Re-checks at this period too, to catch sweeps completing (they raise no event). */
  refreshMs?: number;
}

const API_EVENTS = ['machineAdded', 'machineChanged', 'machineRemoved', 'infoChanged'] as const;

/** Keeps STATUS= current: on every machine or manager change (debounced) and periodically. */
export class StatusReporter {
  private debounce: TimerHandle | undefined;
  private readonly refresh: PeriodicTask;
  private running = false;
  private override: string | undefined;
  private extension: { run: number; gate: TimeoutExtension } | undefined;
  private readonly onChange = () => this.schedule();

  constructor(private readonly o: StatusReporterOptions) {
    // A throwing flush is a bug: rethrown, it ends the process as an uncaught error would.
    this.refresh = new PeriodicTask(o.clock, o.refreshMs ?? 5000, async () => this.flush(), (err) => {
      throw err;
    });
  }

  current(): string {
    const base = formatStatus({ info: this.o.api.info(), records: this.o.api.list(), lastSweepAt: this.o.lastSweepAt() });
    return this.override ? `${this.override} | ${base}` : base;
  }

  start(): void {
    if (this.running) return;
    this.running = true;
    for (const e of API_EVENTS) this.o.api.on(e, this.onChange);
    this.flush();
    this.refresh.start();
  }

  /** A prefix such as "host shutdown: 2 of 4 guests still running" shown until cleared. */
  setOverride(text: string | undefined): void {
    this.override = text;
    this.flush();
  }

  /**
   * A stop run's progress: its line shown as the prefix, and systemd's stop timeout extended while
   * the run makes progress (hostshutdown/stop-progress.ts), by allowanceMs past the group's end.
   */
  stopProgress(p: StopRunProgress, allowanceMs: number): void {
    const now = this.o.clock.now();
    this.setOverride(stopStatusLine(p, now));
    // A new run (another deadline) starts a fresh account of its progress.
    if (this.extension?.run !== p.runDeadlineAt) this.extension = { run: p.runDeadlineAt, gate: new TimeoutExtension(allowanceMs) };
    const ms = this.extension.gate.next(p, now);
    if (ms !== undefined) this.o.notifier.extendTimeout(ms);
  }

  stop(): void {
    if (!this.running) return;
    this.running = false;
    for (const e of API_EVENTS) this.o.api.off(e, this.onChange);
    this.debounce?.cancel();
    this.refresh.stop();
  }

  private flush(): void {
    if (this.running) this.o.notifier.status(this.current());
  }

  private schedule(): void {
    if (!this.running || this.debounce) return;
    this.debounce = this.o.clock.setTimer(this.o.debounceMs ?? 250, () => {
      this.debounce = undefined;
      this.flush();
    });
  }
}
