import type { Clock } from '../lifecycle/clock.js';
import { PeriodicTask } from '../lifecycle/timers.js';
import { withTimeout } from '../lifecycle/with-timeout.js';
import type { Logger } from '../logging/logger.js';
import { describeError } from '../machine/errors.js';
import type { Notifier } from './notifier.js';

// The systemd watchdog, pinged only while the agent is really working: the event loop turns on
// time, the sweeper finishes passes, and our own D-Bus objects answer. An unreachable libvirtd
// is none of these (the sweeper skips machines while disconnected and still completes passes):
// that is "degraded", and systemd must not restart us for it.

export interface HealthInputs {
  now: number;
  /** How late the watchdog timer fired (event loop lag), in ms. */
  loopLagMs: number;
  /** When the watchdog started: the baseline before the first sweep/probe. */
  startedAt: number;
  lastSweepAt: number;
  /** Last time our own bus answered a self-call; undefined = no probe configured. */
  lastBusAnswerAt: number | undefined;
  /** During stop only the loop counts (the sweeper is stopped, the bus may be gone). */
  stopping: boolean;
}

export interface HealthThresholds {
  maxLoopLagMs: number;
  sweepStaleAfterMs: number;
  busStaleAfterMs: number;
}

export interface Health {
  healthy: boolean;
  problems: string[];
}

export function assessHealth(i: HealthInputs, t: HealthThresholds): Health {
  const problems: string[] = [];
  if (i.loopLagMs > t.maxLoopLagMs) problems.push(`event loop lagged ${Math.round(i.loopLagMs)} ms`);
  if (!i.stopping) {
    const sweptAt = Math.max(i.lastSweepAt, i.startedAt);
    if (i.now - sweptAt > t.sweepStaleAfterMs) problems.push(`no sweep completed for ${Math.round((i.now - sweptAt) / 1000)}s`);
    if (i.lastBusAnswerAt !== undefined) {
      const answeredAt = Math.max(i.lastBusAnswerAt, i.startedAt);
      if (i.now - answeredAt > t.busStaleAfterMs) problems.push(`D-Bus self-call unanswered for ${Math.round((i.now - answeredAt) / 1000)}s`);
    }
  }
  return { healthy: problems.length === 0, problems };
}

/** Thresholds from systemd's interval and the agent's own periods. */
export function healthThresholds(o: { watchdogMs: number; sweepIntervalMs: number; callTimeoutMs: number }): HealthThresholds {
  return {
    // Half the watchdog: one more such stall and systemd would have fired anyway.
    maxLoopLagMs: o.watchdogMs / 2,
    // A pass may wait on a libvirt call that times out; two missed passes are a wedge.
    sweepStaleAfterMs: 2 * o.sweepIntervalMs + 2 * o.callTimeoutMs,
    busStaleAfterMs: Math.max(3 * (o.watchdogMs / 2), 10_000),
  };
}

export interface WatchdogOptions {
  clock: Clock;
  notifier: Notifier;
  logger: Logger;
  thresholds: HealthThresholds;
  lastSweepAt: () => number;
  /** A call to ourselves over the bus; resolves when answered. Optional. */
  busProbe?: () => Promise<void>;
  /** Bound on one probe. */
  probeTimeoutMs?: number;
}

export class Watchdog {
  private readonly pings: PeriodicTask;
  private startedAt = 0;
  private expectedAt = 0;
  private lastBusAnswerAt: number | undefined;
  private probing = false;
  private stopping = false;
  private lastProblems = '';
  readonly pingIntervalMs: number;

  constructor(private readonly o: WatchdogOptions) {
    this.pingIntervalMs = o.notifier.watchdogIntervalMs / 2;
    if (o.busProbe) this.lastBusAnswerAt = 0;
    // A throwing check is a bug: rethrown, it ends the process as an uncaught error would.
    this.pings = new PeriodicTask(o.clock, this.pingIntervalMs, async () => this.tick(), (err) => {
      throw err;
    });
  }

  get enabled(): boolean {
    return this.pingIntervalMs > 0;
  }

  start(): void {
    if (!this.enabled || this.startedAt) return;
    this.startedAt = this.o.clock.now();
    this.o.logger.info(`watchdog: pinging every ${this.pingIntervalMs} ms while healthy`);
    this.probe();
    this.tick(true);
    this.pings.start();
  }

  /** From now on only the event loop counts. */
  setStopping(): void {
    this.stopping = true;
  }

  stop(): void {
    this.pings.stop();
  }

  /** One health check (exported for tests and logs). */
  check(loopLagMs = 0): Health {
    return assessHealth({
      now: this.o.clock.now(),
      loopLagMs,
      startedAt: this.startedAt,
      lastSweepAt: this.o.lastSweepAt(),
      lastBusAnswerAt: this.lastBusAnswerAt,
      stopping: this.stopping,
    }, this.o.thresholds);
  }

  private tick(first = false): void {
    const now = this.o.clock.now();
    const lag = first ? 0 : Math.max(0, now - this.expectedAt);
    const health = this.check(lag);
    if (health.healthy) {
      this.o.notifier.watchdog();
      if (this.lastProblems) this.o.logger.info('watchdog: healthy again, pinging');
      this.lastProblems = '';
    } else {
      const text = health.problems.join('; ');
      if (text !== this.lastProblems) this.o.logger.error(`watchdog: not pinging systemd: ${text}`);
      this.lastProblems = text;
    }
    if (!this.stopping) this.probe();
    this.expectedAt = now + this.pingIntervalMs; // when the next tick is due (PeriodicTask times it from here)
  }

  private probe(): void {
    const busProbe = this.o.busProbe;
    if (!busProbe || this.probing) return;
    this.probing = true;
    const timeoutMs = this.o.probeTimeoutMs ?? 5000;
    void withTimeout(this.o.clock, timeoutMs, busProbe, () => new Error(`no answer within ${timeoutMs} ms`))
      .then(() => {
        this.lastBusAnswerAt = this.o.clock.now();
      })
      .catch((err) => this.o.logger.warn(`watchdog: D-Bus self-call failed: ${describeError(err)}`))
      .finally(() => {
        this.probing = false;
      });
  }
}
