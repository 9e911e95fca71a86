import { Backoff } from '../lifecycle/backoff.js';
import type { Clock } from '../lifecycle/clock.js';

export const RESTART_BASE_MS = 1000;
export const RESTART_MAX_MS = 5 * 60_000;
/** A machine that stayed up this long starts again from the shortest delay. */
export const RESTART_STABLE_MS = 10 * 60_000;

/**
 * Remembers which machines this process saw running and when a machine that stopped outside the
 * agent may be started again: 1 s, 2 s, 4 s ... up to 5 min while it keeps stopping, so a guest
 * that dies at boot does not spin. The time is kept per machine, so an extra pass cannot start
 * it early.
 */
export class RestartSchedule {
  private readonly backoff = new Backoff(RESTART_BASE_MS, RESTART_MAX_MS);
  private readonly upSince = new Map<string, number>();
  private readonly restartAt = new Map<string, number>();

  constructor(private readonly clock: Clock) {}

  /** The domain runs while its record says running (or the agent has just started it). */
  sawRunning(name: string): void {
    if (!this.upSince.has(name)) this.upSince.set(name, this.clock.now());
  }

  /** Whether this process saw the machine running since it last stopped or was forgotten. */
  wasSeenRunning(name: string): boolean {
    return this.upSince.has(name);
  }

  /** It stopped without the agent asking: returns the delay before it may be started again. */
  stoppedOutside(name: string): number {
    const now = this.clock.now();
    const up = this.upSince.get(name);
    if (up !== undefined && now - up >= RESTART_STABLE_MS) this.backoff.succeed(name);
    this.upSince.delete(name);
    const delay = this.backoff.fail(name);
    this.restartAt.set(name, now + delay);
    return delay;
  }

  /** Milliseconds left before a pending restart may happen; 0 when none is pending or it is due. */
  waitLeft(name: string): number {
    const at = this.restartAt.get(name);
    return at === undefined ? 0 : Math.max(0, at - this.clock.now());
  }

  /** Whether a restart after an outside stop is waiting (or due). */
  isPending(name: string): boolean {
    return this.restartAt.has(name);
  }

  /** The agent started the domain again. */
  restarted(name: string): void {
    this.restartAt.delete(name);
    this.sawRunning(name);
  }

  /** What was seen running is no longer evidence (a host shutdown stops guests on purpose). */
  forgetSightings(): void {
    this.upSince.clear();
  }

  /** The machine was powered off, handed to the sweeper or removed: start from scratch next time. */
  forget(name: string): void {
    this.upSince.delete(name);
    this.restartAt.delete(name);
    this.backoff.succeed(name);
  }
}
