import type { Clock } from '../lifecycle/clock.js';
import { Semaphore } from '../lifecycle/semaphore.js';
import type { Logger } from '../logging/logger.js';
import { describeError } from '../machine/errors.js';
import { isDomainActive, type Hypervisor } from '../hypervisor/port.js';
import { withCallTimeout } from '../hypervisor/libvirt/call-timeout.js';
import { decideShutdownStep } from '../domains/shutdown-policy.js';
import type { PlannedGroup, PlannedGuest } from './stop-plan.js';
import type { GuestResult } from './stop-procedure.js';

// Runs a stop plan group by group. Each group has its budget and ends early once all its guests
// are off. Per guest: force = destroy at once; shutdown = ACPI, resent every retry interval
// (domains/shutdown-policy.ts), destroyed at the budget end; save = libvirt save to a file,
// falling back to ACPI when it fails, destroyed (which aborts a running save) at the budget end.
// No machine record is touched; the caller turns the listener calls into events and the record.

export interface StopCoordinatorOptions {
  hypervisor: Hypervisor;
  clock: Clock;
  logger: Logger;
  retryIntervalMs: number;
  /** At most this many shutdown requests and destroys in flight at once, per group. */
  parallelism: number;
  /**
   * Saves in flight at once. A save holds a libvirt call slot for its whole length, so this stays
   * below the adapter's slots: one is always left for the listings and the destroys at the budget end.
   */
  maxConcurrentSaves: number;
  /** Where a guest's memory goes. */
  savedStateFile: (machine: string) => string;
  /** How often to look for guests that went off. */
  pollIntervalMs?: number;
  /** Bound on one destroy or shutdown request (a hung qemu must not hold the run forever). */
  destroyTimeoutMs?: number;
  /** Added to a save's libvirt timeout past the budget end, so our own destroy always comes first. */
  saveMarginMs?: number;
  /** Aborted when the run is called off: stop sending, leave the rest running. */
  signal?: AbortSignal;
  listener: StopListener;
  /** Opens every log line: "host shutdown", "service stop", "drain". */
  label?: string;
}

export interface GuestOutcome {
  result: GuestResult;
  /** Milliseconds from the start of the run. */
  afterMs: number;
  detail: string;
}

export interface StopProgress {
  /** 1-based index of the group under way, and how many groups the run has. */
  group: number;
  groups: number;
  minPriority: number;
  guestsInGroup: number;
  runningInGroup: number;
  groupDeadlineAt: number;
  runDeadlineAt: number;
  /** Guests whose result is known, over the whole run: grows as guests go off. */
  finished: number;
  total: number;
}

/** What happens during a run, as it happens. */
export interface StopListener {
  groupStarted(index: number, deadlineAt: number): void;
  /** The first ACPI request went out (also after a failed save). */
  shutdownRequested(guest: PlannedGuest): void;
  saveFailed(guest: PlannedGuest, why: string): void;
  finished(guest: PlannedGuest, outcome: GuestOutcome): void;
  /** Awaited before the next group begins (the record is persisted here). */
  groupEnded(index: number): Promise<void>;
  progress(p: StopProgress): void;
}

type Mode = 'acpi' | 'saving' | 'destroying' | 'done';

interface GuestRun {
  guest: PlannedGuest;
  mode: Mode;
  asked: boolean;
  lastSentAt: number;
  requests: number;
  sending: boolean;
  /** Set when a save fell back: goes into the detail line. */
  saveProblem?: string;
}

export class StopCoordinator {
  private readonly calls: Semaphore;
  private readonly saves: Semaphore;
  private readonly pollMs: number;
  private readonly destroyTimeoutMs: number;
  private readonly saveMarginMs: number;
  private readonly label: string;
  private finishedCount = 0;
  private total = 0;
  /** Set by any guest event, so the wait ends early. */
  private dirty = false;
  private wake: (() => void) | undefined;

  constructor(private readonly o: StopCoordinatorOptions) {
    this.calls = new Semaphore(Math.max(1, o.parallelism));
    this.saves = new Semaphore(Math.max(1, o.maxConcurrentSaves));
    this.pollMs = o.pollIntervalMs ?? 500;
    this.destroyTimeoutMs = o.destroyTimeoutMs ?? 30_000;
    this.saveMarginMs = o.saveMarginMs ?? 5000;
    this.label = o.label ?? 'stop';
  }

  /** Runs every group in order; startedAt and runDeadlineAt are the run's (afterMs counts from startedAt). */
  async run(groups: readonly PlannedGroup[], startedAt: number, runDeadlineAt: number): Promise<void> {
    this.total = groups.reduce((n, g) => n + g.guests.length, 0);
    for (let i = 0; i < groups.length; i++) {
      if (this.o.signal?.aborted) {
        for (const g of groups[i]!.guests) this.finish(newRun(g), startedAt, 'left-running', 'the run was cancelled before its group began');
        continue;
      }
      await this.runGroup(i, groups, startedAt, runDeadlineAt);
      await this.o.listener.groupEnded(i);
    }
  }

  private async runGroup(index: number, groups: readonly PlannedGroup[], startedAt: number, runDeadlineAt: number): Promise<void> {
    const { clock, logger } = this.o;
    const group = groups[index]!;
    // Never past the run's bound: a slow destroy in an earlier group shortens the later ones.
    const deadline = Math.min(clock.now() + group.budgetSec * 1000, runDeadlineAt);
    const guests = group.guests.map(newRun);
    this.o.listener.groupStarted(index, deadline);
    logger.info(`${this.label}: group ${index + 1}/${groups.length} (priority >= ${group.minPriority}, budget ${group.budgetSec}s): ${guests.map((g) => `${g.guest.machine} (${g.guest.action})`).join(', ')}`);
    for (const g of guests) {
      if (g.guest.action === 'force') this.destroy(g, startedAt, 'force: destroyed at once');
      else if (g.guest.action === 'save') this.save(g, startedAt, deadline);
    }
    const open = () => guests.filter((g) => g.mode !== 'done');
    let budgetSpent = false;
    for (;;) {
      this.dirty = false;
      if (open().length === 0) break;
      if (this.o.signal?.aborted) {
        for (const g of open()) {
          this.finish(g, startedAt, 'left-running', g.mode === 'saving'
            ? 'the run was cancelled while the guest was being saved (the save may still complete)'
            : `the run was cancelled (${requests(g.requests)} sent)`);
        }
        break;
      }
      await this.markOff(guests, startedAt);
      const now = clock.now();
      if (now >= deadline && !budgetSpent) {
        budgetSpent = true;
        const left = guests.filter((g) => g.mode === 'acpi' || g.mode === 'saving');
        if (left.length) logger.warn(`${this.label}: group ${index + 1}/${groups.length} budget of ${group.budgetSec}s spent: destroying ${left.length} guest${left.length === 1 ? '' : 's'}`, { guests: left.map((g) => g.guest.domain).join(',') });
      }
      for (const g of guests) {
        if (g.mode === 'saving' && now >= deadline) {
          logger.warn(`${this.label}: ${g.guest.machine}: save still running at the budget end: destroying it`);
          this.destroy(g, startedAt, 'the save was still running at the budget end: destroyed');
        }
        if (g.mode !== 'acpi' || g.sending) continue;
        const step = decideShutdownStep({ asked: g.asked, lastSentAt: g.lastSentAt, forceStopAt: deadline, destroyUnasked: false }, true, now, this.o.retryIntervalMs);
        if (step.kind === 'request' || step.kind === 'retry') this.request(g);
        else if (step.kind === 'force') this.destroy(g, startedAt, `${this.ignoredText(g)}: destroyed at the budget end`);
      }
      this.progress(index, groups, guests, deadline, runDeadlineAt);
      if (open().length === 0) break;
      await this.pause(this.nextWaitMs(guests, deadline));
    }
    this.progress(index, groups, guests, deadline, runDeadlineAt);
  }

  /** Lists the domains; guests on ACPI whose domain is gone or off went down cleanly. */
  private async markOff(guests: GuestRun[], startedAt: number): Promise<void> {
    if (!guests.some((g) => g.mode === 'acpi')) return;
    let active: Set<string>;
    try {
      const domains = await this.bounded('listDomains', () => this.o.hypervisor.listDomains());
      active = new Set(domains.filter((d) => isDomainActive(d.state)).map((d) => d.name));
    } catch (err) {
      this.o.logger.warn(`${this.label}: listing guests failed: ${describeError(err)}`);
      return;
    }
    for (const g of guests) {
      if (g.mode !== 'acpi' || active.has(g.guest.domain)) continue;
      const done = `shut down after ${requests(g.requests)}`;
      const detail = g.saveProblem ? `${g.saveProblem}; ${done}` : done;
      this.finish(g, startedAt, 'clean', detail);
      this.o.logger.debug(`${this.label}: ${g.guest.domain} shut down cleanly after ${((this.o.clock.now() - startedAt) / 1000).toFixed(1)}s`);
    }
  }

  private request(g: GuestRun): void {
    g.sending = true;
    const first = !g.asked;
    void this.calls.run(async () => {
      if (g.mode !== 'acpi' || this.o.signal?.aborted) return;
      try {
        await this.bounded('shutdownDomain', () => this.o.hypervisor.shutdownDomain(g.guest.domain));
        g.requests++;
        if (first) this.o.listener.shutdownRequested(g.guest);
        // The first request is in the journal as the ShutdownRequested event already.
        if (first) this.o.logger.debug(`${this.label}: ACPI shutdown sent to ${g.guest.domain}`);
        else this.o.logger.info(`${this.label}: ACPI shutdown sent again to ${g.guest.domain}`);
      } catch (err) {
        this.o.logger.warn(`${this.label}: shutdown request to ${g.guest.domain} failed: ${describeError(err)}`);
      }
    }).finally(() => {
      // A failed request counts as asked too: the retry interval paces the next try.
      g.asked = true;
      g.lastSentAt = this.o.clock.now();
      g.sending = false;
      this.poke();
    });
  }

  private save(g: GuestRun, startedAt: number, deadline: number): void {
    g.mode = 'saving';
    void this.saves.run(async () => {
      if (g.mode !== 'saving' || this.o.signal?.aborted) return;
      const file = this.o.savedStateFile(g.guest.machine);
      // Longer than the budget left: our destroy at the budget end must come before libvirt's
      // timeout, or the adapter counts the call stuck and refuses every later call.
      const timeoutMs = Math.max(0, deadline - this.o.clock.now()) + this.destroyTimeoutMs + this.saveMarginMs;
      const began = this.o.clock.now();
      try {
        await withCallTimeout(this.o.clock, timeoutMs + 1000, 'saveDomain', () => this.o.hypervisor.saveDomain(g.guest.domain, file, timeoutMs));
        if (g.mode === 'saving' || g.mode === 'destroying') {
          this.finish(g, startedAt, 'saved', `saved to ${file} in ${((this.o.clock.now() - began) / 1000).toFixed(1)}s`);
          this.o.logger.debug(`${this.label}: ${g.guest.domain} saved to ${file}`);
        }
      } catch (err) {
        if (g.mode !== 'saving') return; // destroyed at the budget end: that path records it
        const why = describeError(err);
        g.saveProblem = `save failed (${why})`;
        g.mode = 'acpi';
        this.o.listener.saveFailed(g.guest, why);
        this.o.logger.warn(`${this.label}: saving ${g.guest.machine} failed (${why}): falling back to ACPI shutdown`);
      } finally {
        this.poke();
      }
    });
  }

  private destroy(g: GuestRun, startedAt: number, detail: string): void {
    g.mode = 'destroying';
    void this.calls.run(async () => {
      const issued = this.o.clock.now();
      try {
        await this.bounded('destroyDomain', () => this.o.hypervisor.destroyDomain(g.guest.domain));
        if (g.mode === 'destroying') {
          this.finish(g, startedAt, 'forced', g.saveProblem ? `${g.saveProblem}; ${detail}` : detail);
          this.o.logger.debug(`${this.label}: ${g.guest.domain} destroyed; the destroy took ${this.o.clock.now() - issued} ms`);
        }
      } catch (err) {
        if (g.mode === 'destroying') this.finish(g, startedAt, 'failed', `destroy failed: ${describeError(err)}`);
        this.o.logger.error(`${this.label}: destroying ${g.guest.domain} failed: ${describeError(err)}`);
      } finally {
        this.poke();
      }
    });
  }

  private finish(g: GuestRun, startedAt: number, result: GuestResult, detail: string): void {
    g.mode = 'done';
    this.finishedCount++;
    this.o.listener.finished(g.guest, { result, afterMs: this.o.clock.now() - startedAt, detail });
  }

  /** The save problem, if any, is prefixed by destroy(). */
  private ignoredText(g: GuestRun): string {
    return `ignored ${requests(g.requests)}`;
  }

  private progress(index: number, groups: readonly PlannedGroup[], guests: GuestRun[], deadline: number, runDeadlineAt: number): void {
    this.o.listener.progress({
      group: index + 1,
      groups: groups.length,
      minPriority: groups[index]!.minPriority,
      guestsInGroup: guests.length,
      runningInGroup: guests.filter((g) => g.mode !== 'done').length,
      groupDeadlineAt: deadline,
      runDeadlineAt,
      finished: this.finishedCount,
      total: this.total,
    });
  }

  /**
   * Until the next poll, retry or budget end, whichever comes first. Times already passed do not
   * count: past the budget end, the destroys in flight poke the loop when they return.
   */
  private nextWaitMs(guests: GuestRun[], deadline: number): number {
    const now = this.o.clock.now();
    let until = now + this.pollMs;
    const consider = (t: number) => {
      if (t > now) until = Math.min(until, t);
    };
    consider(deadline);
    for (const g of guests) if (g.mode === 'acpi' && g.asked) consider(g.lastSentAt + this.o.retryIntervalMs);
    return until - now;
  }

  /** Sleeps until ms pass, a guest event pokes, or the run is aborted. */
  private async pause(ms: number): Promise<void> {
    if (this.dirty) return;
    const stop = new AbortController();
    const onAbort = () => stop.abort();
    this.o.signal?.addEventListener('abort', onAbort, { once: true });
    this.wake = onAbort;
    try {
      await this.o.clock.sleep(ms, stop.signal).catch(() => undefined);
    } finally {
      this.wake = undefined;
      this.o.signal?.removeEventListener('abort', onAbort);
    }
  }

  private poke(): void {
    this.dirty = true;
    this.wake?.();
  }

  /** A libvirt call bounded on the clock (a hung qemu must not hold the host shutdown). */
  private bounded<T>(op: string, call: () => Promise<T>): Promise<T> {
    return withCallTimeout(this.o.clock, this.destroyTimeoutMs, op, call);
  }
}

function newRun(guest: PlannedGuest): GuestRun {
  return { guest, mode: 'acpi', asked: false, lastSentAt: 0, requests: 0, sending: false };
}

const requests = (n: number) => `${n} ACPI request${n === 1 ? '' : 's'}`;
