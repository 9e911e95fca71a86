import type { Clock, TimerHandle } from '../lifecycle/clock.js';
import type { Logger } from '../logging/logger.js';
import { describeError } from '../machine/errors.js';
import type { DomainSummary, Hypervisor } from '../hypervisor/port.js';

export type DomainSnapshot = ReadonlyMap<string, DomainSummary>;

export interface ObserverListener {
  /** changed: domain names that appeared, vanished or changed state since the last snapshot. */
  onSnapshot(snapshot: DomainSnapshot, changed: ReadonlySet<string>): void | Promise<void>;
  onConnectionChange(connected: boolean): void;
}

/**
 * Watches libvirt by polling: the binding has no lifecycle events, so one listing per tick tells
 * every domain's state at the cost of one call, however many machines there are.
 */
export class DomainObserver {
  private snapshot: Map<string, DomainSummary> = new Map();
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
      domains = await this.hypervisor.listDomains();
    } catch (err) {
      this.setConnected(false, describeError(err));
      return;
    }
    this.setConnected(true);
    const next = new Map(domains.map((d) => [d.name, d]));
    const changed = new Set<string>();
    for (const [name, d] of next) if (this.snapshot.get(name)?.state !== d.state) changed.add(name);
    for (const name of this.snapshot.keys()) if (!next.has(name)) changed.add(name);
    this.snapshot = next;
    try {
      await this.listener.onSnapshot(next, changed);
    } catch (err) {
      this.logger.error(`handling a domain snapshot failed: ${describeError(err)}`);
    }
  }

  private setConnected(connected: boolean, reason?: string): void {
    if (connected === this.connected) return;
    this.connected = connected;
    if (connected) this.logger.info(`connected to libvirt at ${this.hypervisor.uri}`);
    else this.logger.warn(`libvirt at ${this.hypervisor.uri} is unavailable: ${reason}; retrying`);
    this.listener.onConnectionChange(connected);
  }
}
