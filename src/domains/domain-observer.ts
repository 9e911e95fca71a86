import type { Clock, TimerHandle } from '../lifecycle/clock.js';
import type { Logger } from '../logging/logger.js';
import { describeError } from '../machine/errors.js';
import { isDomainActive, type DomainSummary, type Hypervisor } from '../hypervisor/port.js';

export type DomainSnapshot = ReadonlyMap<string, DomainSummary>;

export interface ObserverListener {
  /** changed: domain names that appeared, vanished or changed state since the last snapshot. */
  onSnapshot(snapshot: DomainSnapshot, changed: ReadonlySet<string>): void | Promise<void>;
  onConnectionChange(connected: boolean): void;
}

/**
 * Watches libvirt by polling, since the binding has no lifecycle events. Each tick asks only which
 * domains are active (a cost that follows the running domains, not the defined ones); the full
 * listing of every domain and its state, and the snapshot listeners see, comes when that set
 * changed, after a reconnect, and every fullListIntervalMs (a pause, or a domain defined or
 * undefined while off, shows no change in the active set).
 */
export class DomainObserver {
  private snapshot: Map<string, DomainSummary> = new Map();
  /** The snapshot's active domains, against which each tick's active listing is compared. */
  private activeNames = new Set<string>();
  private lastFullAt = Number.NEGATIVE_INFINITY;
  private connected = false;
  private timer: TimerHandle | undefined;
  private stopped = true;
  private polling: Promise<void> | undefined;
  private lastPollAt = 0;

  constructor(
    private readonly hypervisor: Hypervisor,
    private readonly clock: Clock,
    private readonly logger: Logger,
    private readonly pollIntervalMs: number,
    private readonly listener: ObserverListener,
    private readonly fullListIntervalMs = pollIntervalMs,
  ) {}

  get isConnected(): boolean {
    return this.connected;
  }

  get lastSnapshot(): DomainSnapshot {
    return this.snapshot;
  }

  /** When the last poll finished (ms), for health checks. */
  get lastPollFinishedAt(): number {
    return this.lastPollAt;
  }

  domain(domainName: string): DomainSummary | undefined {
    return this.snapshot.get(domainName);
  }

  /**
   * The agent itself changed a domain's state: the next poll compares against this, so a guest
   * that dies before that poll still shows as a change instead of looking like the old state.
   */
  noteState(domainName: string, state: DomainSummary['state']): void {
    const known = this.snapshot.get(domainName);
    this.snapshot.set(domainName, { ...known, name: domainName, state });
    if (isDomainActive(state)) this.activeNames.add(domainName);
    else this.activeNames.delete(domainName);
  }

  /** Polls once now and then every interval. */
  async start(): Promise<void> {
    this.stopped = false;
    await this.pollNow();
  }

  stop(): Promise<void> {
    this.stopped = true;
    this.timer?.cancel();
    return this.polling ?? Promise.resolve();
  }

  /** Runs a poll (or joins the one in flight) and schedules the next. */
  pollNow(): Promise<void> {
    if (!this.polling) {
      this.timer?.cancel();
      this.polling = this.poll().finally(() => {
        this.polling = undefined;
        this.lastPollAt = this.clock.now();
        if (!this.stopped) this.timer = this.clock.setTimer(this.pollIntervalMs, () => void this.pollNow());
      });
    }
    return this.polling;
  }

  private async poll(): Promise<void> {
    let domains: DomainSummary[];
    try {
      if (!this.hypervisor.isConnected()) await this.hypervisor.connect();
      if (!this.fullListingDue() && this.sameActiveSet(await this.hypervisor.listActiveDomainNames())) return;
      domains = await this.hypervisor.listDomains();
    } catch (err) {
      this.setConnected(false, describeError(err));
      return;
    }
    this.lastFullAt = this.clock.now();
    this.setConnected(true);
    const next = new Map(domains.map((d) => [d.name, d]));
    const changed = new Set<string>();
    for (const [name, d] of next) if (this.snapshot.get(name)?.state !== d.state) changed.add(name);
    for (const name of this.snapshot.keys()) if (!next.has(name)) changed.add(name);
    this.snapshot = next;
    this.activeNames = new Set(domains.filter((d) => isDomainActive(d.state)).map((d) => d.name));
    try {
      await this.listener.onSnapshot(next, changed);
    } catch (err) {
      this.logger.error(`handling a domain snapshot failed: ${describeError(err)}`);
    }
  }

  /** After a reconnect (the daemon may have changed anything) and every fullListIntervalMs. */
  private fullListingDue(): boolean {
    return !this.connected || this.clock.now() - this.lastFullAt >= this.fullListIntervalMs;
  }

  private sameActiveSet(active: readonly string[]): boolean {
    return active.length === this.activeNames.size && active.every((name) => this.activeNames.has(name));
  }

  private setConnected(connected: boolean, reason?: string): void {
    if (connected === this.connected) return;
    this.connected = connected;
    if (connected) this.logger.info(`connected to libvirt at ${this.hypervisor.uri}`);
    else this.logger.warn(`libvirt at ${this.hypervisor.uri} is unavailable: ${reason}; retrying`);
    this.listener.onConnectionChange(connected);
  }
}
