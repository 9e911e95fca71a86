import type { Clock, TimerHandle } from '../lifecycle/clock.js';
import type { Logger } from '../logging/logger.js';
import { describeError } from '../machine/errors.js';
import { DomainEventsUnsupported, isDomainActive, type DomainEventWatch, type DomainSummary, type Hypervisor } from '../hypervisor/port.js';

export type DomainSnapshot = ReadonlyMap<string, DomainSummary>;

export interface ObserverListener {
  /** changed: domain names that appeared, vanished or changed state since the last snapshot. */
  onSnapshot(snapshot: DomainSnapshot, changed: ReadonlySet<string>): void | Promise<void>;
  onConnectionChange(connected: boolean): void;
}

export interface DomainObserverOptions {
  hypervisor: Hypervisor;
  clock: Clock;
  logger: Logger;
  listener: ObserverListener;
  /** Without events: how often libvirt is asked which domains are active. */
  pollIntervalMs: number;
  /** How often every domain is listed: with events the only poll, the safety net for a lost event. */
  fullListIntervalMs: number;
  /** Follow libvirt's domain events where the hypervisor has them (and poll where it has not). */
  useEvents: boolean;
}

/** Event bursts larger than this (a host starting every guest) are answered by one full listing. */
const MAX_SINGLE_LOOKUPS = 64;

/**
 * Watches libvirt. With domain events, a domain's event brings a fresh look at that domain alone,
 * and every domain is listed only every fullListIntervalMs, so an idle host costs nothing per
 * domain. Without them (a driver or URI that has none, or events turned off) it polls: each tick
 * asks only which domains are active (a cost that follows the running domains), and every domain
 * is listed when that set changed, after a reconnect, and every fullListIntervalMs (a pause, or a
 * domain defined or undefined while off, shows no change in the active set).
 *
 * Listings and event lookups run one at a time, in order, so an older answer never overwrites a
 * newer one. Events are subscribed to before the listing that follows, so none falls between.
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
  /** Polls and event lookups, one after another. */
  private work: Promise<void> = Promise.resolve();
  private events: DomainEventWatch | undefined;
  private lastSubscribeAt = Number.NEGATIVE_INFINITY;
  /** Why the last subscription failed, so the same reason is logged once, not at every attempt. */
  private eventsFailure: string | undefined;
  /** Events cannot be had here at all: asked again only once per full listing. */
  private eventsUnsupported = false;
  /** Domains with an event not yet looked at. */
  private readonly eventNames = new Set<string>();
  private lookupQueued = false;
  private readonly o: DomainObserverOptions;

  constructor(options: DomainObserverOptions) {
    this.o = options;
  }

  get isConnected(): boolean {
    return this.connected;
  }

  /** Whether changes now arrive as libvirt events (else the observer polls). */
  get followsEvents(): boolean {
    return this.events !== undefined;
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

  /** Once it resolves, nothing touches libvirt or the listener any more. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.timer?.cancel();
    await (this.polling ?? Promise.resolve());
    await this.dropEvents();
    await this.work; // an event lookup in flight
  }

  /** Runs a poll (or joins the one in flight) and schedules the next; nothing once stopped. */
  pollNow(): Promise<void> {
    if (!this.polling && !this.stopped) {
      this.timer?.cancel();
      this.polling = this.serially(() => this.poll()).finally(() => {
        this.polling = undefined;
        this.lastPollAt = this.o.clock.now();
        const interval = this.events ? this.o.fullListIntervalMs : this.o.pollIntervalMs;
        if (!this.stopped) this.timer = this.o.clock.setTimer(interval, () => void this.pollNow());
      });
    }
    return this.polling ?? Promise.resolve();
  }

  private serially(task: () => Promise<void>): Promise<void> {
    const run = this.work.then(task);
    this.work = run.catch(() => undefined);
    return run;
  }

  private async poll(): Promise<void> {
    if (this.stopped) return; // a poll queued behind a lookup when stop() came
    let domains: DomainSummary[];
    try {
      if (!this.o.hypervisor.isConnected()) await this.o.hypervisor.connect();
      await this.subscribeIfDue();
      if (!this.events && !this.fullListingDue() && this.sameActiveSet(await this.o.hypervisor.listActiveDomainNames())) return;
      domains = await this.o.hypervisor.listDomains();
    } catch (err) {
      this.setConnected(false, describeError(err));
      await this.dropEvents();
      return;
    }
    this.lastFullAt = this.o.clock.now();
    this.setConnected(true);
    const next = new Map(domains.map((d) => [d.name, d]));
    const changed = new Set<string>();
    for (const [name, d] of next) if (this.snapshot.get(name)?.state !== d.state) changed.add(name);
    for (const name of this.snapshot.keys()) if (!next.has(name)) changed.add(name);
    this.snapshot = next;
    this.activeNames = new Set(domains.filter((d) => isDomainActive(d.state)).map((d) => d.name));
    await this.tell(changed);
  }

  private async tell(changed: ReadonlySet<string>): Promise<void> {
    try {
      await this.o.listener.onSnapshot(this.snapshot, changed);
    } catch (err) {
      this.o.logger.error(`handling a domain snapshot failed: ${describeError(err)}`);
    }
  }

  /** After a reconnect (the daemon may have changed anything) and every fullListIntervalMs. */
  private fullListingDue(): boolean {
    return !this.connected || this.o.clock.now() - this.lastFullAt >= this.o.fullListIntervalMs;
  }

  private sameActiveSet(active: readonly string[]): boolean {
    return active.length === this.activeNames.size && active.every((name) => this.activeNames.has(name));
  }

  // ---- events ----

  /**
   * Subscribes when not yet following events: at every poll while it fails for a passing reason
   * (libvirtd restarting), once per full listing where events cannot be had at all.
   */
  private async subscribeIfDue(): Promise<void> {
    if (!this.o.useEvents || this.events || this.stopped) return;
    if (this.eventsUnsupported && this.o.clock.now() - this.lastSubscribeAt < this.o.fullListIntervalMs) return;
    this.lastSubscribeAt = this.o.clock.now();
    let watch: DomainEventWatch;
    try {
      watch = await this.o.hypervisor.watchDomainEvents({
        onDomainEvent: (name) => this.onDomainEvent(name),
        onEventsLost: (reason) => this.onEventsLost(reason),
      });
    } catch (err) {
      if (!this.o.hypervisor.isConnected()) throw err; // libvirt itself is away: the poll says so
      this.eventsUnsupported = err instanceof DomainEventsUnsupported;
      const reason = describeError(err);
      if (reason !== this.eventsFailure) {
        this.o.logger.warn(`libvirt domain events are unavailable (${reason}); polling libvirt every ${this.o.pollIntervalMs} ms instead`);
      }
      this.eventsFailure = reason;
      return;
    }
    if (this.stopped) {
      await watch.close().catch(() => undefined);
      return;
    }
    this.events = watch;
    this.eventsFailure = undefined;
    this.eventsUnsupported = false;
    this.o.logger.info(`following libvirt domain events; every domain is listed every ${Math.round(this.o.fullListIntervalMs / 1000)} s as a safety net`);
  }

  private onEventsLost(reason: string): void {
    const lost = this.events;
    this.events = undefined;
    void lost?.close().catch(() => undefined);
    if (this.stopped) return;
    this.o.logger.warn(`lost libvirt domain events: ${reason}; polling until they are back`);
    // Whatever changed while no one listened shows in a full listing, at once.
    this.lastFullAt = Number.NEGATIVE_INFINITY;
    void this.pollNow();
  }

  private async dropEvents(): Promise<void> {
    const watch = this.events;
    this.events = undefined;
    await watch?.close().catch((err: unknown) => this.o.logger.warn(`closing the libvirt event connection failed: ${describeError(err)}`));
  }

  private onDomainEvent(domainName: string): void {
    this.eventNames.add(domainName);
    if (this.lookupQueued) return;
    this.lookupQueued = true;
    void this.serially(async () => {
      this.lookupQueued = false;
      await this.lookUpEventDomains();
    });
  }

  /** A fresh state for each domain with an event since the last look; a burst gets a full listing. */
  private async lookUpEventDomains(): Promise<void> {
    const names = [...this.eventNames];
    this.eventNames.clear();
    if (this.stopped || names.length === 0) return;
    if (names.length > MAX_SINGLE_LOOKUPS || !this.connected) {
      this.lastFullAt = Number.NEGATIVE_INFINITY;
      void this.pollNow();
      return;
    }
    const changed = new Set<string>();
    try {
      for (const name of names) {
        const state = await this.o.hypervisor.domainState(name);
        if (this.stopped) return;
        const known = this.snapshot.get(name);
        if (state === known?.state) continue;
        changed.add(name);
        if (state === undefined) {
          this.snapshot.delete(name);
          this.activeNames.delete(name);
        } else {
          this.noteState(name, state);
        }
      }
    } catch (err) {
      if (this.stopped) return;
      // libvirt failed under us: the poll finds out whether it is gone, and lists every domain.
      this.o.logger.warn(`looking up a domain after its event failed: ${describeError(err)}`);
      this.lastFullAt = Number.NEGATIVE_INFINITY;
      void this.pollNow();
    }
    if (changed.size > 0) await this.tell(changed);
  }

  private setConnected(connected: boolean, reason?: string): void {
    if (connected === this.connected) return;
    this.connected = connected;
    if (connected) this.o.logger.info(`connected to libvirt at ${this.o.hypervisor.uri}`);
    else this.o.logger.warn(`libvirt at ${this.o.hypervisor.uri} is unavailable: ${reason}; retrying`);
    this.o.listener.onConnectionChange(connected);
  }
}
