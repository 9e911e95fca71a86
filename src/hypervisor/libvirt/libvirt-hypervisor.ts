import { ConnectListAllDomainsFlags, DomainState, Hypervisor as NativeHypervisor, type Domain } from '@unraid/libvirt';
import type { Clock } from '../../lifecycle/clock.js';
import type { Logger } from '../../logging/logger.js';
import { AgentError, describeError } from '../../machine/errors.js';
import { DOMAIN_NAME_PREFIX } from '../../machine/names.js';
import type { DomainDescription, DomainEventListener, DomainEventWatch, DomainIdentity, DomainRunState, DomainSummary, Hypervisor } from '../port.js';
import { watchDomainEvents } from './domain-events.js';
import { buildDomainXml, domainUuid, markedMachineName } from './domain-xml.js';
import { BoundedCalls, CallQueueTimeoutError, CallTimeoutError, withCallTimeout } from './call-timeout.js';

// The binding carries no libvirt error codes, only messages: these patterns are the whole
// classification. Messages differ by driver (qemu vs test), hence the loose wording.
const NOT_FOUND = /Domain not found|no domain with matching/i;
const NOT_RUNNING = /not running/i; // qemu: "domain is not running", test: "domain 'x' not running"
const ALREADY_RUNNING = /already running|already active/i;
const CONNECTION_LOST =
  /End of file while reading data|Cannot write data|Cannot recv data|not connected|Broken pipe|Failed to connect socket|client socket is closed|Connection reset by peer/i;

export interface LibvirtHypervisorOptions {
  uri: string;
  /** Upper bound for every single native call, connectOpen included. */
  callTimeoutMs: number;
  logger: Logger;
  clock: Clock;
  /**
   * Native calls in flight at once. Each holds a libuv pool thread until libvirtd answers, and a
   * hung daemon never does: keep half the pool (UV_THREADPOOL_SIZE, default 4) for file I/O.
   */
  maxConcurrentCalls?: number;
  /** How long a call may wait for a free slot before it fails unissued; defaults to callTimeoutMs. */
  queueTimeoutMs?: number;
  /** Opens the native binding; tests pass a fake. */
  createNative?: (uri: string) => NativeHypervisor;
}

const messageOf = (err: unknown): string => describeError(err);
export const isDomainNotFound = (err: unknown): boolean => NOT_FOUND.test(messageOf(err));
export const isConnectionLost = (err: unknown): boolean => CONNECTION_LOST.test(messageOf(err));

export class LibvirtHypervisor implements Hypervisor {
  readonly uri: string;
  private readonly callTimeoutMs: number;
  private readonly logger: Logger;
  private readonly clock: Clock;
  /** Undefined when never opened, closed, or marked broken: the next call opens a fresh one. */
  private native: NativeHypervisor | undefined;
  private opening: Promise<NativeHypervisor> | undefined;
  private closed = false;
  /**
   * Native calls that timed out but have not returned still hold a libuv pool thread, which file
   * I/O needs too. While any is pending the daemon is hung, so fail fast instead of parking
   * another thread on every poll (a frozen libvirtd would otherwise starve the store).
   */
  private readonly calls: BoundedCalls;
  /** Native calls in flight at once; a long call (a save) holds one for its whole length. */
  readonly callSlots: number;
  private readonly createNative: (uri: string) => NativeHypervisor;
  private idNames = new Map<number, string>();

  constructor(opts: LibvirtHypervisorOptions) {
    this.uri = opts.uri;
    this.callTimeoutMs = opts.callTimeoutMs;
    this.logger = opts.logger;
    this.clock = opts.clock;
    this.callSlots = opts.maxConcurrentCalls ?? Math.max(1, Math.floor((Number(process.env.UV_THREADPOOL_SIZE) || 4) / 2));
    this.calls = new BoundedCalls({
      clock: opts.clock,
      slots: this.callSlots,
      callTimeoutMs: opts.callTimeoutMs,
      queueTimeoutMs: opts.queueTimeoutMs ?? opts.callTimeoutMs,
    });
    this.createNative = opts.createNative ?? ((uri) => new NativeHypervisor({ uri }));
  }

  async connect(): Promise<void> {
    this.closed = false;
    await this.connection();
  }

  isConnected(): boolean {
    return this.native !== undefined;
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.opening?.catch(() => undefined);
    const native = this.native;
    this.native = undefined;
    if (!native) return;
    try {
      await withCallTimeout(this.clock, this.callTimeoutMs, 'connectClose', () => native.connectClose());
    } catch (err) {
      this.logger.warn('closing the libvirt connection failed', { uri: this.uri, error: messageOf(err) });
    }
  }

  watchDomainEvents(listener: DomainEventListener): Promise<DomainEventWatch> {
    return watchDomainEvents({ uri: this.uri, clock: this.clock, callTimeoutMs: this.callTimeoutMs }, listener);
  }

  async listDomains(): Promise<DomainSummary[]> {
    // Three RPCs whatever the number of domains: active IDs, inactive names, and the (rare) paused
    // domains. A name is fetched only for an ID seen for the first time, so a steady host of
    // thousands of domains costs no per-domain call per poll. Keep the paused query even with no
    // active IDs: the binding's connectListDomains and connectListDefinedDomains answer [] when
    // libvirt fails (they ignore the -1), so connectListAllDomains is the call that reports a lost
    // connection; without it a dead libvirtd would read as "every domain is gone".
    const [ids, inactive, paused] = await Promise.all([
      this.call('connectListDomains', (n) => n.connectListDomains()),
      this.call('connectListDefinedDomains', (n) => n.connectListDefinedDomains()),
      this.call('connectListAllDomains(PAUSED)', (n) => n.connectListAllDomains(ConnectListAllDomainsFlags.PAUSED)),
    ]);
    const pausedNames = await this.namesOf(paused);
    const activeNames = await this.namesOfIds(ids);
    const summaries = new Map<string, DomainSummary>();
    for (const name of inactive) summaries.set(name, { name, state: 'shutoff' });
    for (const name of activeNames) summaries.set(name, { name, state: pausedNames.has(name) ? 'paused' : 'running' });
    return [...summaries.values()].filter((d) => d.name.startsWith(DOMAIN_NAME_PREFIX));
  }

  async listActiveDomainNames(): Promise<string[]> {
    // The ID listing answers [] when libvirt fails, so a cheap call that does report a lost
    // connection goes with it (nodeGetInfo: no DNS lookup as getHostname may do, no error logged
    // by the daemon as a lookup of a missing domain would be).
    const [ids] = await Promise.all([
      this.call('connectListDomains', (n) => n.connectListDomains()),
      this.call('nodeGetInfo', (n) => n.nodeGetInfo()),
    ]);
    const names = await this.namesOfIds(ids);
    return names.filter((name) => name.startsWith(DOMAIN_NAME_PREFIX));
  }

  /** Names of running domains by ID, cached: libvirt does not reuse an ID while the daemon runs. */
  private async namesOfIds(ids: number[]): Promise<string[]> {
    const known = new Map<number, string>();
    await Promise.all(ids.map(async (id) => {
      const name = this.idNames.get(id) ?? (await this.nameOfId(id));
      if (name !== undefined) known.set(id, name);
    }));
    this.idNames = known;
    return [...known.values()];
  }

  private async nameOfId(id: number): Promise<string | undefined> {
    try {
      const domain = await this.call(`domainLookupByID(${id})`, (n) => n.domainLookupByID(id));
      return await this.call('getName', () => domain.getName());
    } catch (err) {
      if (isDomainNotFound(err)) return undefined; // it stopped between the listing and the lookup
      throw err;
    }
  }

  async defineDomain(description: DomainDescription): Promise<string> {
    const name = description.domainName;
    const xml = buildDomainXml(description);
    const domain = await this.call(`domainDefineXML(${name})`, (n) => n.domainDefineXML(xml));
    return this.call(`getUUIDString(${name})`, () => domain.getUUIDString());
  }

  async startDomain(name: string): Promise<void> {
    const domain = await this.lookup(name);
    if (!domain) throw new Error(`libvirt create(${name}): Domain not found`);
    await this.ignoring(ALREADY_RUNNING, `create(${name})`, () => domain.create());
  }

  async shutdownDomain(name: string): Promise<void> {
    const domain = await this.lookup(name);
    if (domain) await this.ignoring(NOT_RUNNING, `shutdown(${name})`, () => domain.shutdown());
  }

  async destroyDomain(name: string): Promise<void> {
    const domain = await this.lookup(name);
    if (domain) await this.ignoring(NOT_RUNNING, `destroy(${name})`, () => domain.destroy());
  }

  async saveDomain(name: string, file: string, timeoutMs: number): Promise<void> {
    const domain = await this.lookup(name);
    if (!domain) throw new Error(`libvirt save(${name}): Domain not found`);
    await this.call(`save(${name})`, () => domain.save(file), timeoutMs);
  }

  async restoreDomain(file: string, timeoutMs: number): Promise<void> {
    await this.call('domainRestore', (n) => n.domainRestore(file), timeoutMs);
  }

  async undefineDomain(name: string): Promise<void> {
    const domain = await this.lookup(name);
    if (domain) await this.ignoring(undefined, `undefine(${name})`, () => domain.undefine());
  }

  async domainState(name: string): Promise<DomainRunState | undefined> {
    const domain = await this.lookup(name);
    if (!domain) return undefined;
    try {
      return runStateOf((await this.call(`getInfo(${name})`, () => domain.getInfo())).state);
    } catch (err) {
      if (isDomainNotFound(err)) return undefined;
      throw err;
    }
  }

  async domainIdentity(name: string): Promise<DomainIdentity | undefined> {
    const xml = await this.domainXml(name);
    if (xml === undefined) return undefined;
    const uuid = domainUuid(xml);
    if (uuid === undefined) throw new Error(`libvirt getXMLDesc(${name}) returned XML without a <uuid>`);
    return { uuid, machineName: markedMachineName(xml) };
  }

  private async domainXml(name: string): Promise<string | undefined> {
    const domain = await this.lookup(name);
    if (!domain) return undefined;
    try {
      return await this.call(`getXMLDesc(${name})`, () => domain.getXMLDesc());
    } catch (err) {
      if (isDomainNotFound(err)) return undefined; // undefined between lookup and read
      throw err;
    }
  }

  private async namesOf(domains: Domain[]): Promise<Set<string>> {
    const names = await Promise.all(domains.map((d) => this.call('getName', () => d.getName())));
    return new Set(names);
  }

  private async lookup(name: string): Promise<Domain | undefined> {
    try {
      return await this.call(`domainLookupByName(${name})`, (n) => n.domainLookupByName(name));
    } catch (err) {
      if (isDomainNotFound(err)) return undefined;
      throw err;
    }
  }

  /** Runs a domain call where not-found (and errors matching `done`) mean the goal already holds. */
  private async ignoring(done: RegExp | undefined, op: string, fn: () => Promise<void>): Promise<void> {
    try {
      await this.call(op, fn);
    } catch (err) {
      if (isDomainNotFound(err) || (done && done.test(messageOf(err)))) return;
      throw err;
    }
  }

  private connection(): Promise<NativeHypervisor> {
    if (this.closed) return Promise.reject(new AgentError('HypervisorUnavailable', `libvirt connection to ${this.uri} is closed`));
    if (this.native) return Promise.resolve(this.native);
    this.opening ??= this.open().finally(() => (this.opening = undefined));
    return this.opening;
  }

  private async open(): Promise<NativeHypervisor> {
    this.refuseWhileStuck('connectOpen');
    // A fresh native object each time: the old one may be stuck inside a call that never returns.
    const native = this.createNative(this.uri);
    let opened: Promise<void> | undefined;
    try {
      await this.calls.run('connectOpen', () => (opened = native.connectOpen()));
    } catch (err) {
      // An open that succeeds after we gave up would leak: close it when it lands.
      void opened?.then(() => native.connectClose(), () => undefined).catch(() => undefined);
      if (err instanceof AgentError) throw err;
      throw new AgentError('HypervisorUnavailable', `cannot connect to libvirt at ${this.uri}: ${messageOf(err)}`, { cause: err });
    }
    this.native = native;
    this.idNames.clear(); // a new daemon may hand out the same IDs again
    this.logger.debug('opened a libvirt connection', { uri: this.uri });
    return native;
  }

  /** One native call under the timeout; lost connections become HypervisorUnavailable. */
  private async call<T>(op: string, fn: (native: NativeHypervisor) => Promise<T>, timeoutMs?: number): Promise<T> {
    this.refuseWhileStuck(op);
    const native = await this.connection();
    try {
      return await this.calls.run(op, () => fn(native), timeoutMs);
    } catch (err) {
      if (err instanceof CallTimeoutError) {
        this.markBroken(native, err.message, false);
        throw err;
      }
      // Never issued: it says the agent is busy, nothing about the connection.
      if (err instanceof CallQueueTimeoutError) throw err;
      if (isConnectionLost(err)) {
        this.markBroken(native, messageOf(err), true);
        throw new AgentError('HypervisorUnavailable', `libvirt call ${op} failed: ${messageOf(err)}`, { cause: err });
      }
      if (err instanceof AgentError || isDomainNotFound(err)) throw err;
      throw new Error(`libvirt call ${op} failed: ${messageOf(err)}`, { cause: err });
    }
  }

  private refuseWhileStuck(op: string): void {
    const stuck = this.calls.stuck;
    if (stuck > 0) {
      throw new AgentError('HypervisorUnavailable', `libvirt call ${op} not attempted: ${stuck} earlier calls to ${this.uri} have not returned yet`);
    }
  }

  private markBroken(native: NativeHypervisor, why: string, closeOld: boolean): void {
    if (this.native !== native) return; // already replaced by a newer connection
    this.native = undefined;
    this.logger.warn('libvirt connection lost; reconnecting on next call', { uri: this.uri, error: why });
    // A dead socket closes quickly; a hung daemon would park another pool thread, so skip that.
    if (closeOld) void native.connectClose().catch(() => undefined);
  }
}

function runStateOf(state: DomainState): DomainRunState {
  switch (state) {
    case DomainState.RUNNING:
    case DomainState.BLOCKED: // running, waiting on I/O
      return 'running';
    case DomainState.PAUSED:
    case DomainState.PMSUSPENDED:
      return 'paused';
    case DomainState.SHUTOFF:
      return 'shutoff';
    case DomainState.CRASHED:
      return 'crashed';
    default: // NOSTATE, SHUTDOWN (shutting down, still running)
      return 'other';
  }
}
