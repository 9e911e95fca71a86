import type { Config } from '../config/config.js';
import type { Hypervisor } from '../hypervisor/port.js';
import type { Clock } from '../lifecycle/clock.js';
import type { Logger } from '../logging/logger.js';
import { describeError } from '../machine/errors.js';
import { HostShutdownCoordinator, type HostShutdownProgress, type HostShutdownReport } from './coordinator.js';
import { decideStop, type StopDecision } from './decision.js';
import type { HostPlatform, InhibitorLock } from './host-platform.js';

// Ties logind, systemd and the coordinator together, the way kubelet's node shutdown manager
// does: hold a delay lock while running, start the guest shutdowns on PrepareForShutdown(true)
// (a head start: logind waits at most InhibitDelayMaxSec for us), decide at SIGTERM from
// systemd's SystemState, and release the lock when the guests are down.

/** What the handler needs from the agent: stop restarting guests, or resume after a cancel. */
export interface ShutdownTarget {
  /** Stops the reconciler (power stays "on" in the records) and sets the Manager State. */
  enterShutdown(state: 'host-shutdown' | 'stopping'): void;
  /** A host shutdown was called off: resume reconciling. */
  leaveShutdown(): void;
}

export interface HostShutdownHandlerOptions {
  /** Undefined when there is no system bus (development): the decision then needs no logind. */
  platform: HostPlatform | undefined;
  hypervisor: Hypervisor;
  target: ShutdownTarget;
  clock: Clock;
  logger: Logger;
  /** Read at use time, so a reload (SIGHUP) of these keys takes effect. */
  settings: () => Config['hostShutdown'] & { retryIntervalMs: number };
  pollIntervalMs?: number;
  destroyTimeoutMs?: number;
  onProgress?: (p: HostShutdownProgress) => void;
}

export interface StopOutcome {
  decision: StopDecision;
  report?: HostShutdownReport;
}

const WHO = 'vmkeeperd';
const WHY = 'Shutting down virtual machines';

export class HostShutdownHandler {
  private lock: InhibitorLock | undefined;
  private prepareSeen = false;
  private run: { abort: AbortController; promise: Promise<HostShutdownReport> } | undefined;
  private stopped = false;

  constructor(private readonly o: HostShutdownHandlerOptions) {}

  /** Takes the delay lock and listens for PrepareForShutdown; failures only cost the head start. */
  async start(): Promise<void> {
    const p = this.o.platform;
    if (!p) {
      this.o.logger.info('no system bus: host shutdown is detected from SIGTERM alone');
      return;
    }
    await p.onPrepareForShutdown((active) => this.onPrepare(active)).catch((err) =>
      this.o.logger.warn(`cannot subscribe to logind PrepareForShutdown: ${describeError(err)}`));
    await this.takeLock();
  }

  /** The SIGTERM path: decide, shut the guests down if that is the decision, release the lock. */
  async onStop(): Promise<StopOutcome> {
    this.stopped = true;
    const s = this.o.settings();
    let systemState: string | undefined;
    if (this.o.platform) {
      systemState = await this.o.platform.systemState().catch((err) => {
        this.o.logger.warn(`cannot read systemd's SystemState: ${describeError(err)}`);
        return undefined;
      });
    }
    const decision = decideStop({
      systemState,
      prepareForShutdown: this.prepareSeen,
      hostShutdownAction: s.action,
      onServiceStop: s.onServiceStop,
    });
    const label = decision.reason === 'host-shutdown' ? 'host shutdown' : 'service stop';
    this.o.logger.info(`${label}: ${decision.why}; guests: ${decision.guests === 'shutdown' ? 'shut down' : 'left running'}`, {
      systemState: systemState ?? 'unknown',
      prepareForShutdown: this.prepareSeen,
    });
    try {
      if (decision.guests === 'shutdown' || this.run) {
        const report = await this.shutdownGuests(decision.reason === 'host-shutdown' ? 'host-shutdown' : 'stopping');
        return { decision, report };
      }
      return { decision };
    } finally {
      this.releaseLock();
    }
  }

  /** Releases the lock and the system bus connection. */
  close(): void {
    this.stopped = true;
    this.releaseLock();
    this.o.platform?.close();
  }

  private onPrepare(active: boolean): void {
    if (active) {
      this.prepareSeen = true;
      const s = this.o.settings();
      if (s.action !== 'shutdown') {
        this.o.logger.info('logind: the host is shutting down; hostShutdown.action is "leave": guests are left to libvirt');
        this.releaseLock();
        return;
      }
      this.o.logger.info('logind: the host is shutting down (PrepareForShutdown): starting guest shutdowns now');
      void this.shutdownGuests('host-shutdown').catch((err) => this.o.logger.error(`host shutdown failed: ${describeError(err)}`));
      return;
    }
    if (!this.prepareSeen) return;
    this.prepareSeen = false;
    if (this.stopped) return;
    this.o.logger.warn('logind: the shutdown was cancelled (PrepareForShutdown false): resuming');
    this.run?.abort.abort();
    this.run = undefined;
    this.o.target.leaveShutdown();
    void this.takeLock();
  }

  private shutdownGuests(state: 'host-shutdown' | 'stopping'): Promise<HostShutdownReport> {
    if (this.run) return this.run.promise;
    const s = this.o.settings();
    this.o.target.enterShutdown(state);
    const abort = new AbortController();
    const coordinator = new HostShutdownCoordinator({
      hypervisor: this.o.hypervisor,
      clock: this.o.clock,
      logger: this.o.logger,
      timeoutMs: s.timeoutSec * 1000,
      retryIntervalMs: s.retryIntervalMs,
      parallelism: s.parallelism,
      pollIntervalMs: this.o.pollIntervalMs,
      destroyTimeoutMs: this.o.destroyTimeoutMs,
      onProgress: this.o.onProgress,
      signal: abort.signal,
    });
    // Guests down: let logind go on at once instead of waiting out InhibitDelayMaxSec.
    const promise = coordinator.run().finally(() => abort.signal.aborted || this.releaseLock());
    this.run = { abort, promise };
    return this.run.promise;
  }

  private async takeLock(): Promise<void> {
    if (!this.o.platform || this.lock || this.stopped) return;
    try {
      this.lock = await this.o.platform.inhibitShutdown(WHO, WHY);
      this.o.logger.info(`holding a logind shutdown delay lock (${this.lock.kind === 'fd' ? 'D-Bus fd' : 'systemd-inhibit child'})`);
      if (this.stopped) this.releaseLock();
    } catch (err) {
      this.o.logger.warn(`no logind delay lock (${describeError(err)}): host shutdown still works from SIGTERM, without the head start`);
    }
  }

  private releaseLock(): void {
    if (!this.lock) return;
    this.lock.release();
    this.lock = undefined;
    this.o.logger.info('released the logind shutdown delay lock');
  }
}
