import type { Config } from '../config/config.js';
import type { Clock } from '../lifecycle/clock.js';
import type { Logger } from '../logging/logger.js';
import { describeError } from '../machine/errors.js';
import { BUS_LOST, decideStop, type StopDecision } from './decision.js';
import type { HostPlatform, InhibitorLock } from './host-platform.js';
import type { ShutdownRecord, StopProcedure } from './stop-procedure.js';

// Ties logind, systemd and the stop procedure together, the way kubelet's node shutdown manager
// does: hold a delay lock while running, start the guest shutdowns on PrepareForShutdown(true)
// (a head start: logind waits at most InhibitDelayMaxSec for us), decide at SIGTERM from
// systemd's SystemState, and release the lock when the guests are down. When the system bus
// connection is lost, subscribe and take the lock again on the new one (retried until it works).

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
  /** Stops the guests by policy and priority, and records the run. */
  procedure: StopProcedure;
  target: ShutdownTarget;
  clock: Clock;
  logger: Logger;
  /** Read at use time, so a reload (SIGHUP) of these keys takes effect. */
  settings: () => Pick<Config['hostShutdown'], 'action' | 'onServiceStop' | 'timeoutSec'>;
  /** What a run may take past hostShutdown.timeoutSec (the destroys at the end): part of the bound logind is asked for. */
  stopAllowanceMs?: number;
  /** First wait before subscribing to logind again after a lost system bus; doubles up to 30 s. */
  resubscribeRetryMs?: number;
}

/** Why the process stops: a signal (SIGTERM/SIGINT), or its D-Bus connection is gone. */
export type StopCause = 'signal' | 'bus-lost';

export interface StopOutcome {
  decision: StopDecision;
  /** The stop run's record, when guests were stopped. */
  record?: ShutdownRecord;
}

const WHO = 'vmkeeperd';
const WHY = 'Shutting down virtual machines';

export class HostShutdownHandler {
  private lock: InhibitorLock | undefined;
  private prepareSeen = false;
  private run: { abort: AbortController; promise: Promise<ShutdownRecord> } | undefined;
  private stopped = false;
  /** Aborts the resubscription's retry waits at stop. */
  private readonly stopping = new AbortController();
  private resubscribing: Promise<void> | undefined;

  constructor(private readonly o: HostShutdownHandlerOptions) {}

  /** Takes the delay lock and listens for PrepareForShutdown; failures only cost the head start. */
  async start(): Promise<void> {
    const p = this.o.platform;
    if (!p) {
      this.o.logger.info('no system bus: host shutdown is detected from SIGTERM alone');
      return;
    }
    p.onConnectionLost((reason) => this.onSystemBusLost(reason));
    await this.subscribe(p).catch((err) =>
      this.o.logger.warn(`cannot subscribe to logind PrepareForShutdown: ${describeError(err)}`));
    await this.takeLock();
    await this.checkDelayBound(p);
  }

  /**
   * logind waits for delay locks at most InhibitDelayMaxSec, a global logind setting: below our
   * bound the host goes down before the guests are. Only a warning: system files are the admin's.
   */
  private async checkDelayBound(p: HostPlatform): Promise<void> {
    if (this.o.settings().action !== 'shutdown') return; // guests are left to libvirt: nothing to wait for
    const boundSec = this.o.settings().timeoutSec + Math.ceil((this.o.stopAllowanceMs ?? 0) / 1000);
    let usec: number;
    try {
      usec = await p.inhibitDelayMaxUSec();
    } catch (err) {
      this.o.logger.warn(`cannot read logind's InhibitDelayMaxUSec: ${describeError(err)}`);
      return;
    }
    if (usec >= boundSec * 1_000_000) return;
    this.o.logger.warn(`logind waits at most ${usec / 1_000_000}s for shutdown delay locks (InhibitDelayMaxSec), below the host-shutdown bound of ${boundSec}s: ` +
      `logind may go on before the guests are down; write InhibitDelayMaxSec=${boundSec} to a drop-in such as /etc/systemd/logind.conf.d/vmkeeper.conf and restart systemd-logind`);
  }

  /**
   * The stop path: decide, shut the guests down if that is the decision, release the lock. A stop
   * because the bus was lost never starts guest shutdowns; one logind already started is finished.
   */
  async onStop(cause: StopCause = 'signal'): Promise<StopOutcome> {
    this.markStopped();
    if (cause === 'bus-lost') return this.onBusLost();
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
        const record = await this.shutdownGuests(decision.reason === 'host-shutdown' ? 'host-shutdown' : 'stopping');
        return { decision, record };
      }
      return { decision };
    } finally {
      this.releaseLock();
    }
  }

  private async onBusLost(): Promise<StopOutcome> {
    const decision = BUS_LOST;
    try {
      if (!this.run) {
        this.o.logger.warn(`${decision.why}; guests left running`);
        return { decision };
      }
      this.o.logger.warn(`${decision.why}; the host shutdown logind announced goes on`);
      return { decision, record: await this.run.promise };
    } finally {
      this.releaseLock();
    }
  }

  /** Releases the lock and the system bus connection. */
  close(): void {
    this.markStopped();
    this.releaseLock();
    this.o.platform?.close();
  }

  private markStopped(): void {
    this.stopped = true;
    this.stopping.abort();
  }

  private subscribe(p: HostPlatform): Promise<void> {
    return p.onPrepareForShutdown((active) => this.onPrepare(active));
  }

  private onSystemBusLost(reason: string): void {
    if (this.stopped || this.resubscribing) return;
    this.o.logger.warn(`lost the system bus connection (${reason}): subscribing to logind again`);
    this.resubscribing = this.resubscribe().finally(() => (this.resubscribing = undefined));
  }

  /** Subscribes to PrepareForShutdown again and renews the delay lock, retrying until both work. */
  private async resubscribe(): Promise<void> {
    const p = this.o.platform!;
    let waitMs = this.o.resubscribeRetryMs ?? 1000;
    while (!this.stopped) {
      try {
        await this.subscribe(p);
        await this.renewLock(p);
        this.o.logger.info('subscribed to logind PrepareForShutdown again on the new system bus connection');
        return;
      } catch (err) {
        this.o.logger.warn(`cannot subscribe to logind again (${describeError(err)}): retrying in ${waitMs} ms`);
        const aborted = await this.o.clock.sleep(waitMs, this.stopping.signal).then(() => false, () => true);
        if (aborted) return;
        waitMs = Math.min(waitMs * 2, 30_000);
      }
    }
  }

  /** A new lock first, then the old one goes: logind may have restarted with the bus and lost it. */
  private async renewLock(p: HostPlatform): Promise<void> {
    // A shutdown under way owns the lock's release (or released it on purpose): leave it be.
    if (this.prepareSeen || this.run) return;
    const fresh = await p.inhibitShutdown(WHO, WHY);
    if (this.stopped || this.prepareSeen) return fresh.release();
    const old = this.lock;
    this.lock = fresh;
    old?.release();
    this.o.logger.info(`holding a logind shutdown delay lock again (${fresh.kind === 'fd' ? 'D-Bus fd' : 'systemd-inhibit child'})`);
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

  private shutdownGuests(state: 'host-shutdown' | 'stopping'): Promise<ShutdownRecord> {
    if (this.run) return this.run.promise;
    this.o.target.enterShutdown(state);
    const abort = new AbortController();
    const kind = state === 'host-shutdown' ? 'host-shutdown' : 'service-stop';
    // Guests down: let logind go on at once instead of waiting out InhibitDelayMaxSec.
    const promise = this.o.procedure.run({ kind, signal: abort.signal }).finally(() => abort.signal.aborted || this.releaseLock());
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
