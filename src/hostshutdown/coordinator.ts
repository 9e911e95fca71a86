import type { Clock } from '../lifecycle/clock.js';
import { Semaphore } from '../lifecycle/semaphore.js';
import type { Logger } from '../logging/logger.js';
import { describeError } from '../machine/errors.js';
import { isDomainActive, type Hypervisor } from '../hypervisor/port.js';
import { withCallTimeout } from '../hypervisor/libvirt/call-timeout.js';
import { decideShutdownStep, type ShutdownStep } from '../domains/shutdown-policy.js';

// Host shutdown: every running guest of ours gets an ACPI shutdown at once (bounded
// parallelism), again every retry interval, and whatever still runs at the deadline is
// destroyed: the sweeper's shutdown policy, applied to all guests as one. No machine record is
// touched: power stays "on", so after the reboot the reconciler starts the guests again. Every
// wait goes through the Clock.

export interface HostShutdownOptions {
  hypervisor: Hypervisor;
  clock: Clock;
  logger: Logger;
  timeoutMs: number;
  retryIntervalMs: number;
  /** At most this many libvirt calls at once (shutdown requests and destroys). */
  parallelism: number;
  /** How often to look for guests that went off. */
  pollIntervalMs?: number;
  /** Bound on one destroy (a hung qemu must not hold the host shutdown forever). */
  destroyTimeoutMs?: number;
  /** Called after every poll, for STATUS= and EXTEND_TIMEOUT_USEC. */
  onProgress?: (p: HostShutdownProgress) => void;
  /** Aborted when the shutdown was called off (logind PrepareForShutdown(false)): stop sending. */
  signal?: AbortSignal;
}

export interface HostShutdownProgress {
  total: number;
  stillRunning: number;
  elapsedMs: number;
  deadlineAt: number;
}

export type GuestOutcomeKind = 'shut-down' | 'destroyed' | 'left-running';

export interface GuestOutcome {
  domain: string;
  outcome: GuestOutcomeKind;
  /** Milliseconds from the start of the host shutdown until the guest was seen off. */
  afterMs: number;
  shutdownRequests: number;
}

export interface HostShutdownReport {
  startedAt: number;
  finishedAt: number;
  guests: GuestOutcome[];
  cleanly: number;
  destroyed: number;
  leftRunning: number;
}


export class HostShutdownCoordinator {
  private runPromise: Promise<HostShutdownReport> | undefined;
  private readonly limiter: Semaphore;
  private readonly pollMs: number;
  private readonly destroyTimeoutMs: number;

  constructor(private readonly o: HostShutdownOptions) {
    this.limiter = new Semaphore(Math.max(1, o.parallelism));
    this.pollMs = o.pollIntervalMs ?? 500;
    this.destroyTimeoutMs = o.destroyTimeoutMs ?? 30_000;
  }

  /** Starts the host shutdown once; later calls return the same run. */
  run(): Promise<HostShutdownReport> {
    this.runPromise ??= this.execute();
    return this.runPromise;
  }

  private async execute(): Promise<HostShutdownReport> {
    const { clock, logger } = this.o;
    const startedAt = clock.now();
    const deadlineAt = startedAt + this.o.timeoutMs;
    const pending = new Map<string, { requests: number }>();
    const outcomes: GuestOutcome[] = [];

    // The first listing decides which guests are ours to stop; libvirt may be slow or down.
    let listed: Awaited<ReturnType<Hypervisor['listDomains']>> | undefined;
    while (!listed) {
      try {
        listed = await this.bounded('listDomains', () => this.o.hypervisor.listDomains(), Math.max(1, deadlineAt - clock.now()));
      } catch (err) {
        if (clock.now() >= deadlineAt) {
          logger.error(`host shutdown: cannot list guests (${describeError(err)}); giving up at the deadline`);
          return this.report(startedAt, outcomes);
        }
        logger.warn(`host shutdown: cannot list guests yet: ${describeError(err)}`);
        await clock.sleep(Math.min(this.pollMs, deadlineAt - clock.now()));
      }
    }
    for (const d of listed) if (isDomainActive(d.state)) pending.set(d.name, { requests: 0 });
    const total = pending.size;
    logger.info(`host shutdown: ${total} running guests get an ACPI shutdown; destroy at ${this.o.timeoutMs / 1000}s`, {
      guests: [...pending.keys()].join(','),
      parallelism: this.o.parallelism,
    });
    if (total === 0) return this.report(startedAt, outcomes);

    const sendAll = async (again: boolean) => {
      await Promise.all([...pending.entries()].map(([name, g]) => this.limiter.run(async () => {
        if (!pending.has(name)) return;
        try {
          await this.bounded('shutdownDomain', () => this.o.hypervisor.shutdownDomain(name));
          g.requests++;
          logger.info(`host shutdown: ${again ? 'ACPI shutdown sent again to' : 'ACPI shutdown sent to'} ${name}`);
        } catch (err) {
          logger.warn(`host shutdown: shutdown request to ${name} failed: ${describeError(err)}`);
        }
      })));
    };

    const markOff = async () => {
      let domains;
      try {
        domains = await this.bounded('listDomains', () => this.o.hypervisor.listDomains());
      } catch (err) {
        logger.warn(`host shutdown: listing guests failed: ${describeError(err)}`);
        return;
      }
      const active = new Set(domains.filter((d) => isDomainActive(d.state)).map((d) => d.name));
      for (const [name, g] of pending) {
        if (active.has(name)) continue;
        pending.delete(name);
        const afterMs = clock.now() - startedAt;
        outcomes.push({ domain: name, outcome: 'shut-down', afterMs, shutdownRequests: g.requests });
        logger.info(`host shutdown: ${name} shut down cleanly after ${(afterMs / 1000).toFixed(1)}s`);
      }
    };

    const progress = () =>
      this.o.onProgress?.({ total, stillRunning: pending.size, elapsedMs: clock.now() - startedAt, deadlineAt });

    await sendAll(false);
    let lastSentAt = clock.now();
    // Every guest was asked at once, so one progress stands for all of them.
    const nextStep = (): ShutdownStep => decideShutdownStep(
      { asked: true, lastSentAt, forceStopAt: deadlineAt, destroyUnasked: false }, true, clock.now(), this.o.retryIntervalMs);
    for (;;) {
      await markOff();
      progress();
      if (pending.size === 0) break;
      if (this.o.signal?.aborted) {
        logger.warn(`host shutdown called off: ${pending.size} guests keep running`);
        break;
      }
      let step = nextStep();
      if (step.kind === 'force') break;
      if (step.kind === 'retry') {
        await sendAll(true);
        lastSentAt = clock.now();
        step = nextStep();
      }
      // Past a step's time (a slow send), look again in a millisecond.
      const until = step.kind === 'wait' ? step.until : clock.now();
      await clock.sleep(Math.max(1, Math.min(this.pollMs, until - clock.now())), this.o.signal).catch(() => undefined);
    }

    if (pending.size > 0 && !this.o.signal?.aborted) {
      logger.warn(`host shutdown: timeout of ${this.o.timeoutMs / 1000}s reached: destroying ${pending.size} guests`, {
        guests: [...pending.keys()].join(','),
      });
      await Promise.all([...pending.entries()].map(([name, g]) => this.limiter.run(async () => {
        const issued = clock.now();
        try {
          await this.bounded('destroyDomain', () => this.o.hypervisor.destroyDomain(name));
          pending.delete(name);
          const afterMs = clock.now() - startedAt;
          outcomes.push({ domain: name, outcome: 'destroyed', afterMs, shutdownRequests: g.requests });
          logger.warn(`host shutdown: ${name} destroyed (ignored ${g.requests} ACPI requests; destroy took ${clock.now() - issued} ms)`);
        } catch (err) {
          logger.error(`host shutdown: destroying ${name} failed: ${describeError(err)}`);
        }
      })));
      progress();
    }
    for (const [name, g] of pending) {
      outcomes.push({ domain: name, outcome: 'left-running', afterMs: clock.now() - startedAt, shutdownRequests: g.requests });
    }
    const report = this.report(startedAt, outcomes);
    logger.info(`host shutdown done in ${((report.finishedAt - startedAt) / 1000).toFixed(1)}s: ${report.cleanly} shut down cleanly, ${report.destroyed} destroyed, ${report.leftRunning} left running`);
    return report;
  }

  private report(startedAt: number, guests: GuestOutcome[]): HostShutdownReport {
    const count = (k: GuestOutcomeKind) => guests.filter((g) => g.outcome === k).length;
    return {
      startedAt,
      finishedAt: this.o.clock.now(),
      guests: [...guests].sort((a, b) => a.domain.localeCompare(b.domain)),
      cleanly: count('shut-down'),
      destroyed: count('destroyed'),
      leftRunning: count('left-running'),
    };
  }

  /** A libvirt call bounded on the clock (a hung qemu must not hold the host shutdown). */
  private bounded<T>(op: string, call: () => Promise<T>, ms = this.destroyTimeoutMs): Promise<T> {
    return withCallTimeout(this.o.clock, ms, op, call);
  }
}
