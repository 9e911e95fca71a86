import { randomUUID } from 'node:crypto';
import { systemClock, type Clock, type TimerHandle } from '../../../src/lifecycle/clock.js';
import { AgentError } from '../../../src/machine/errors.js';
import { DOMAIN_NAME_PREFIX } from '../../../src/machine/names.js';
import { DomainEventsUnsupported, type DomainDescription, type DomainEventListener, type DomainEventWatch, type DomainIdentity, type DomainRunState, type DomainSummary, type Hypervisor } from '../../../src/hypervisor/port.js';

// An in-memory hypervisor for unit tests, with guests that obey, ignore or hang on shutdown and
// hooks to inject failures. Same idempotency rules as the libvirt adapter (see the contract tests).

/** obey: shuts off after shutdownDelayMs; ignore: ACPI requests are lost; hang: destroy never returns either. */
export type GuestBehaviour = 'obey' | 'ignore' | 'hang';

export type FakeHypervisorOp =
  | 'connect'
  | 'close'
  | 'listDomains'
  | 'listActiveDomainNames'
  | 'defineDomain'
  | 'startDomain'
  | 'shutdownDomain'
  | 'destroyDomain'
  | 'undefineDomain'
  | 'domainState'
  | 'domainIdentity'
  | 'saveDomain'
  | 'restoreDomain'
  | 'watchDomainEvents';

export interface FakeHypervisorOptions {
  uri?: string;
  clock?: Clock;
  defaultBehaviour?: GuestBehaviour;
  /** How long an obeying guest takes to shut off after a request, on the clock. */
  shutdownDelayMs?: number;
  /** Whether watchDomainEvents works (default: it rejects, as on a driver without events). */
  events?: boolean;
}

interface FakeDomain {
  name: string;
  uuid: string;
  /** What the agent defined; undefined for a domain made outside it (no vmkeeper mark). */
  description: DomainDescription | undefined;
  state: DomainRunState;
  persistent: boolean;
  behaviour?: GuestBehaviour;
  shutdownRequests: number;
  pendingShutdown?: TimerHandle;
  /** How long a save of this domain takes on the clock (0: at once). */
  saveDelayMs: number;
  /** A save under way: a destroy (or any stop) aborts it, as libvirt does. */
  pendingSave?: { timer: TimerHandle; reject: (err: Error) => void };
  hungDestroys: (() => void)[];
}

export class FakeHypervisor implements Hypervisor {
  readonly uri: string;
  readonly calls: { op: FakeHypervisorOp; name?: string }[] = [];
  shutdownDelayMs: number;
  private readonly clock: Clock;
  private readonly defaultBehaviour: GuestBehaviour;
  private readonly domains = new Map<string, FakeDomain>();
  private readonly failures = new Map<FakeHypervisorOp, unknown[]>();
  private readonly held = new Map<FakeHypervisorOp, (() => void)[]>();
  private available = true;
  private connected = false;
  /** Closes so far: a call held across one fails, as on a closed libvirt connection. */
  private closes = 0;
  private readonly eventsSupported: boolean;
  private readonly eventListeners = new Set<DomainEventListener>();

  constructor(opts: FakeHypervisorOptions = {}) {
    this.uri = opts.uri ?? 'fake:///';
    this.clock = opts.clock ?? systemClock;
    this.defaultBehaviour = opts.defaultBehaviour ?? 'obey';
    this.shutdownDelayMs = opts.shutdownDelayMs ?? 0;
    this.eventsSupported = opts.events ?? false;
  }

  // ---- test controls ----

  setGuestBehaviour(name: string, behaviour: GuestBehaviour): void {
    this.require(name).behaviour = behaviour;
  }

  /** Makes the next call of op reject with error (queued: several calls fail in order). */
  failNext(op: FakeHypervisorOp, error: unknown): void {
    this.failures.set(op, [...(this.failures.get(op) ?? []), error]);
  }

  /** false: every call rejects with HypervisorUnavailable, as when libvirtd is down (events end too). */
  setAvailable(available: boolean): void {
    // As with libvirtd: the event connection's close is told while the agent's own connection
    // still looks connected (it finds out at its next call).
    if (!available) this.loseEvents('the fake hypervisor went away');
    this.available = available;
    if (!available) this.connected = false;
  }

  /** Ends every event watch, as libvirtd closing the event connection does. */
  loseEvents(reason: string): void {
    const listeners = [...this.eventListeners];
    this.eventListeners.clear();
    for (const l of listeners) l.onEventsLost(reason);
  }

  /** Event watches now open. */
  get eventWatches(): number {
    return this.eventListeners.size;
  }

  /** Saves of this domain take ms on the clock; a destroy meanwhile aborts the save. */
  setSaveDelay(name: string, ms: number): void {
    this.require(name).saveDelayMs = ms;
  }

  /** Whether a save of the domain is under way. */
  saving(name: string): boolean {
    return this.domains.get(name)?.pendingSave !== undefined;
  }

  shutdownRequests(name: string): number {
    return this.domains.get(name)?.shutdownRequests ?? 0;
  }

  /** State of a domain, or undefined when not defined; sees non-prefixed domains too. */
  stateOf(name: string): DomainRunState | undefined {
    return this.domains.get(name)?.state;
  }

  /**
   * Adds a domain directly (e.g. a host's own, non-prefixed one), bypassing call logging. Without
   * a description it carries no vmkeeper mark; with one, it is marked for description.machineName.
   */
  addDomain(name: string, state: DomainRunState = 'shutoff', uuid: string = randomUUID(), description?: DomainDescription): void {
    this.domains.set(name, newDomain(name, uuid, description && { ...description, domainName: name, uuid }));
    this.setState(name, state);
    this.notify(name);
  }

  /** What the domain was defined from (undefined when missing or made outside the agent). */
  descriptionOf(name: string): DomainDescription | undefined {
    return this.domains.get(name)?.description;
  }

  /** Removes a stopped domain's definition as `virsh undefine` would, behind the agent's back. */
  removeDomain(name: string): void {
    const domain = this.require(name);
    if (domain.state !== 'shutoff') throw new Error(`fake hypervisor: ${name} is running; stop it before removing it`);
    this.domains.delete(name);
    this.notify(name);
  }

  /** UUID of a defined domain (what `virsh domuuid` shows). */
  uuidOf(name: string): string | undefined {
    return this.domains.get(name)?.uuid;
  }

  /** From now on calls of op wait (after being logged) until resume(op): a slow or stuck libvirt. */
  hold(op: FakeHypervisorOp): void {
    if (!this.held.has(op)) this.held.set(op, []);
  }

  /** Lets every held call of op go on, and stops holding new ones. */
  resume(op: FakeHypervisorOp): void {
    const waiting = this.held.get(op) ?? [];
    this.held.delete(op);
    for (const go of waiting) go();
  }

  /** How many calls of op are waiting in hold(). */
  heldCalls(op: FakeHypervisorOp): number {
    return this.held.get(op)?.length ?? 0;
  }

  /** Changes a domain's state from the guest side (it powered off, crashed, paused...). */
  setState(name: string, state: DomainRunState): void {
    const domain = this.require(name);
    if (state === 'shutoff') this.stopped(domain);
    else this.changeState(domain, state);
  }

  /** Lets destroy calls stuck on a hanging guest complete. */
  release(name: string): void {
    const domain = this.domains.get(name);
    if (!domain) return;
    const waiting = domain.hungDestroys.splice(0);
    if (waiting.length) this.stopped(domain);
    for (const resolve of waiting) resolve();
  }

  pendingDestroys(name: string): number {
    return this.domains.get(name)?.hungDestroys.length ?? 0;
  }

  // ---- Hypervisor ----

  async connect(): Promise<void> {
    await this.enter('connect');
    this.connected = true;
  }

  async close(): Promise<void> {
    this.calls.push({ op: 'close' });
    this.connected = false;
    this.closes++;
  }

  isConnected(): boolean {
    return this.connected && this.available;
  }

  async watchDomainEvents(listener: DomainEventListener): Promise<DomainEventWatch> {
    await this.enter('watchDomainEvents');
    if (!this.eventsSupported) throw new DomainEventsUnsupported('fake hypervisor: events are off (pass events: true)');
    this.eventListeners.add(listener);
    return { close: async () => void this.eventListeners.delete(listener) };
  }

  async listDomains(): Promise<DomainSummary[]> {
    await this.enter('listDomains');
    return [...this.domains.values()]
      .filter((d) => d.name.startsWith(DOMAIN_NAME_PREFIX))
      .map((d) => ({ name: d.name, state: d.state }));
  }

  async listActiveDomainNames(): Promise<string[]> {
    await this.enter('listActiveDomainNames');
    return [...this.domains.values()]
      .filter((d) => d.name.startsWith(DOMAIN_NAME_PREFIX) && d.state !== 'shutoff' && d.state !== 'crashed')
      .map((d) => d.name);
  }

  async defineDomain(description: DomainDescription): Promise<string> {
    const { domainName: name, uuid } = description;
    await this.enter('defineDomain', name);
    const existing = this.domains.get(name);
    if (existing && existing.uuid !== uuid) {
      throw new Error(`operation failed: domain '${name}' is already defined with uuid ${existing.uuid}`);
    }
    if (existing) {
      existing.description = description;
      existing.persistent = true;
    } else this.domains.set(name, newDomain(name, uuid, description));
    this.notify(name);
    return uuid;
  }

  async startDomain(name: string): Promise<void> {
    await this.enter('startDomain', name);
    const domain = this.domains.get(name);
    if (!domain) throw notFound(name);
    if (domain.state === 'shutoff' || domain.state === 'crashed') this.changeState(domain, 'running');
  }

  async shutdownDomain(name: string): Promise<void> {
    await this.enter('shutdownDomain', name);
    const domain = this.domains.get(name);
    if (!domain || domain.state === 'shutoff') return;
    domain.shutdownRequests++;
    if (this.behaviourOf(domain) !== 'obey' || domain.pendingShutdown) return;
    if (this.shutdownDelayMs <= 0) return this.stopped(domain);
    domain.pendingShutdown = this.clock.setTimer(this.shutdownDelayMs, () => this.stopped(domain));
  }

  async destroyDomain(name: string): Promise<void> {
    await this.enter('destroyDomain', name);
    const domain = this.domains.get(name);
    if (!domain || domain.state === 'shutoff') return;
    if (this.behaviourOf(domain) === 'hang') {
      return new Promise<void>((resolve) => domain.hungDestroys.push(resolve));
    }
    this.stopped(domain);
  }

  /** Files saveDomain wrote, by path: the domain whose memory each holds. */
  readonly savedStates = new Map<string, string>();

  /** The timeoutMs each saveDomain call was given, in order. */
  readonly saveTimeouts: number[] = [];

  async saveDomain(name: string, file: string, timeoutMs: number): Promise<void> {
    this.saveTimeouts.push(timeoutMs);
    await this.enter('saveDomain', name);
    const domain = this.domains.get(name);
    if (!domain) throw notFound(name);
    if (domain.state === 'shutoff' || domain.state === 'crashed') throw new Error(`Requested operation is not valid: domain is not running`);
    if (this.behaviourOf(domain) === 'hang') {
      return new Promise<void>((resolve) => domain.hungDestroys.push(resolve));
    }
    if (domain.pendingSave) throw new Error(`Timed out during operation: cannot acquire state change lock (held by domain save)`);
    if (domain.saveDelayMs <= 0) {
      this.savedStates.set(file, name);
      return this.stopped(domain);
    }
    // libvirt pauses the guest while its memory is written.
    this.changeState(domain, 'paused');
    return new Promise<void>((resolve, reject) => {
      const timer = this.clock.setTimer(domain.saveDelayMs, () => {
        domain.pendingSave = undefined;
        this.savedStates.set(file, name);
        this.stopped(domain);
        resolve();
      });
      domain.pendingSave = { timer, reject };
    });
  }

  async restoreDomain(file: string): Promise<void> {
    await this.enter('restoreDomain', file);
    const name = this.savedStates.get(file);
    if (name === undefined) throw new Error(`operation failed: cannot open saved state ${file}`);
    const domain = this.domains.get(name);
    if (!domain) throw notFound(name);
    if (domain.state !== 'shutoff' && domain.state !== 'crashed') throw new Error(`operation failed: domain '${name}' is already active`);
    this.changeState(domain, 'running');
  }

  async undefineDomain(name: string): Promise<void> {
    await this.enter('undefineDomain', name);
    const domain = this.domains.get(name);
    if (!domain) return;
    // As libvirt does: a running domain loses its definition only once it stops.
    if (domain.state === 'shutoff') this.domains.delete(name);
    else domain.persistent = false;
    this.notify(name);
  }

  async domainState(name: string): Promise<DomainRunState | undefined> {
    await this.enter('domainState', name);
    return this.domains.get(name)?.state;
  }

  async domainIdentity(name: string): Promise<DomainIdentity | undefined> {
    await this.enter('domainIdentity', name);
    const domain = this.domains.get(name);
    return domain && { uuid: domain.uuid, machineName: domain.description?.machineName };
  }

  // ---- internals ----

  /** Logs the call, waits while op is held, then applies unavailability and injected failures. */
  private async enter(op: FakeHypervisorOp, name?: string): Promise<void> {
    this.calls.push(name === undefined ? { op } : { op, name });
    const waiting = this.held.get(op);
    const closes = this.closes;
    if (waiting) await new Promise<void>((resolve) => waiting.push(resolve));
    // As libvirt's client does: a connection closed under a pending call fails that call.
    if (this.closes !== closes) throw new AgentError('HypervisorUnavailable', `fake hypervisor ${this.uri}: the connection was closed during ${op}`);
    if (!this.available) throw new AgentError('HypervisorUnavailable', `fake hypervisor ${this.uri} is unavailable`);
    const queued = this.failures.get(op);
    if (queued?.length) throw queued.shift();
    this.connected = true;
  }

  private behaviourOf(domain: FakeDomain): GuestBehaviour {
    return domain.behaviour ?? this.defaultBehaviour;
  }

  private stopped(domain: FakeDomain): void {
    domain.pendingShutdown?.cancel();
    domain.pendingShutdown = undefined;
    const save = domain.pendingSave;
    domain.pendingSave = undefined;
    save?.timer.cancel();
    save?.reject(new Error('operation aborted: domain save job: the domain stopped'));
    domain.state = 'shutoff';
    if (!domain.persistent) this.domains.delete(domain.name);
    this.notify(domain.name);
  }

  private changeState(domain: FakeDomain, state: DomainRunState): void {
    domain.state = state;
    this.notify(domain.name);
  }

  /** As libvirt does, events come after the change, from elsewhere (here: a microtask later). */
  private notify(name: string): void {
    if (this.eventListeners.size === 0 || !name.startsWith(DOMAIN_NAME_PREFIX)) return;
    queueMicrotask(() => {
      for (const l of this.eventListeners) l.onDomainEvent(name);
    });
  }

  private require(name: string): FakeDomain {
    const domain = this.domains.get(name);
    if (!domain) throw new Error(`fake hypervisor: no domain ${name}`);
    return domain;
  }
}

function newDomain(name: string, uuid: string, description: DomainDescription | undefined): FakeDomain {
  return { name, uuid, description, state: 'shutoff', persistent: true, shutdownRequests: 0, saveDelayMs: 0, hungDestroys: [] };
}

function notFound(name: string): Error {
  return new Error(`Domain not found: no domain with matching name '${name}'`);
}
