import { NameFlag, RequestNameReply, type Message, type MessageBus } from 'dbus-next';
import { systemClock } from '../lifecycle/clock.js';
import { withTimeout } from '../lifecycle/with-timeout.js';
import type { Logger } from '../logging/logger.js';
import { describeError } from '../machine/errors.js';
import { MACHINE_PATH_PREFIX, MANAGER_PATH, machineObjectPath, sortedIndexOf } from '../machine/names.js';
import type { MachineRecord } from '../machine/record.js';
import type { AgentEvent, MachineApi, MachineApiEvents } from '../service/api.js';
import type { HostApi } from '../drain/host-api.js';
import { LIST_SIGNATURE, MACHINE_INTERFACE, MANAGED_OBJECTS_SIGNATURE, MachineInterface } from './machine-interface.js';
import { MarshalledArray, type MarshalledElement } from './marshalled.js';
import { MANAGER_INTERFACE, ManagerInterface, type MachineDirectory } from './manager-interface.js';
import { filterInbound, type InboundJudge } from './inbound-filter.js';
import { inboundJudge, methodSignatures } from './inbound-policy.js';
import { authorizationGate, dbusNextDispatch, type MethodHandler } from './authorization/authorization-gate.js';
import type { CallerAuthorizer } from './authorization/caller-authorizer.js';
import { rootFirst } from './authorization/root-first.js';
import { OBJECT_MANAGER_INTERFACE, ObjectManagerInterface } from './object-manager.js';
import { guardOutbound } from './outbound-guard.js';
import { CallerIdentity } from './caller-identity.js';
import { STANDARD_METHODS, standardAnswers, type ExportedInterface, type ObjectDirectory } from './standard-answers.js';

// Fronts a MachineApi on the bus: exports the manager and one object per machine, keeps them in
// step with the api's events, and owns the well-known name.

export const BUS_NAME = 'org.vmkeeper1';
const RELEASE_TIMEOUT_MS = 2000;

export interface DBusServiceOptions {
  bus: MessageBus;
  api: MachineApi;
  logger: Logger;
  /** Well-known name to own; tests may pick another. */
  busName?: string;
  /** Asked before every mutating call; without it the bus policy alone guards them. */
  authorizer?: CallerAuthorizer;
  /** Drain and the shutdown records; without it those members answer NotSupported. */
  host?: HostApi;
}

export class DBusService {
  private readonly bus: MessageBus;
  private readonly api: MachineApi;
  private readonly host: HostApi | undefined;
  private readonly logger: Logger;
  private readonly busName: string;
  private readonly manager: ManagerInterface;
  private readonly objectManager: ObjectManagerInterface;
  private readonly machines = new Map<string, MachineInterface>();
  /** Whose call caused an event, asked of the bus daemon. */
  readonly callers: CallerIdentity;
  /** The same machines by object path, for calls addressed to one. */
  private readonly machinesByPath = new Map<string, MachineInterface>();
  /** Exported machine names in ListMachines order, kept sorted as machines come and go. */
  private sortedNames: string[] = [];
  /**
   * The agent default in each machine's GracePeriodSec, read once at start: it is fixed for the
   * agent's life (MachineService.updateInfo cannot change it; a reload says it needs a restart).
   */
  private defaultGrace = 0;
  /**
   * The last ListMachines and GetManagedObjects reply bodies, dropped when a machine changes and
   * rebuilt from each machine's marshalled bytes (only a changed machine is marshalled again).
   */
  private listReply: MarshalledArray | undefined;
  private objectsReply: MarshalledArray | undefined;
  private readonly judge = inboundJudge(
    methodSignatures({
      [MANAGER_INTERFACE]: ManagerInterface.prototype.memberTable,
      [MACHINE_INTERFACE]: MachineInterface.prototype.memberTable,
      [OBJECT_MANAGER_INTERFACE]: ObjectManagerInterface.prototype.memberTable,
    }),
    undefined,
    (path, iface) => iface in STANDARD_METHODS ? this.objects.interfacesAt(path) !== undefined : this.objects.interfacesAt(path)?.[iface] !== undefined,
  );
  private started = false;
  private nameOwned = false;
  private readonly authorizationGate: MethodHandler | undefined;

  constructor(options: DBusServiceOptions) {
    this.bus = options.bus;
    this.api = options.api;
    this.host = options.host;
    this.logger = options.logger;
    this.busName = options.busName ?? BUS_NAME;
    // Without a listener, a reply written after disconnect raises an unhandled 'error' and kills us.
    this.bus.on('error', (err: unknown) => this.logger.warn('D-Bus connection error', { error: describeError(err) }));
    guardOutbound(this.bus, this.logger);
    filterInbound(this.bus, this.judgeInbound, this.logger);
    this.callers = new CallerIdentity(this.bus, this.logger);
    if (options.authorizer) {
      // A call held for polkit is dispatched later: the caller identity must see it again then.
      const dispatch = (msg: Message, bus: MessageBus) => (this.callers.noteCall(msg), dbusNextDispatch(msg, bus));
      const authorizer = rootFirst(options.authorizer, (sender) => this.callers.uidOf(sender), this.logger);
      this.authorizationGate = authorizationGate(this.bus, authorizer, this.logger, dispatch);
    }
    this.manager = new ManagerInterface(this.api, this.directory, this.callers, this.host);
    this.objectManager = new ObjectManagerInterface(() => this.managedObjects());
  }

  /** Exports all objects, then takes the name; throws if another process owns it. */
  async start(): Promise<void> {
    if (this.started) return;
    this.started = true;
    this.defaultGrace = this.api.info().defaultGracePeriodSec;
    // Faults (unknown object, bad arguments) are answered before polkit is asked, as sd-bus services do.
    this.bus.addMethodHandler(this.answerStandard);
    if (this.authorizationGate) this.bus.addMethodHandler(this.authorizationGate);
    this.subscribe();
    this.bus.export(MANAGER_PATH, this.manager);
    this.bus.export(MANAGER_PATH, this.objectManager);
    this.manager.setValues(this.manager.currentProperties(), false);
    for (const record of this.api.list()) this.exportMachine(record, false);
    try {
      await this.callers.start();
      const reply = await this.bus.requestName(this.busName, NameFlag.DO_NOT_QUEUE);
      if (reply !== RequestNameReply.PRIMARY_OWNER && reply !== RequestNameReply.ALREADY_OWNER) {
        throw new Error(`D-Bus name ${this.busName} is already owned by another process (is another vmkeeperd running?)`);
      }
      this.nameOwned = true;
      this.logger.info('D-Bus name acquired', { name: this.busName, machines: this.machines.size });
    } catch (err) {
      this.teardown();
      if (err instanceof Error && err.message.includes('already owned')) throw err;
      throw new Error(`cannot own D-Bus name ${this.busName}: ${describeError(err)}`, { cause: err });
    }
  }

  /** Releases the name and unexports everything; the bus itself stays open for its owner to close. */
  async stop(): Promise<void> {
    if (!this.started) return;
    const owned = this.nameOwned;
    this.teardown();
    if (!owned) return;
    try {
      await withTimeout(systemClock, RELEASE_TIMEOUT_MS, () => this.bus.releaseName(this.busName), () => new Error(`no reply within ${RELEASE_TIMEOUT_MS} ms`));
    } catch (err) {
      this.logger.warn('could not release D-Bus name', { name: this.busName, error: describeError(err) });
    }
  }

  private teardown(): void {
    this.started = false;
    this.nameOwned = false;
    this.unsubscribe();
    this.bus.removeMethodHandler(this.answerStandard);
    if (this.authorizationGate) this.bus.removeMethodHandler(this.authorizationGate);
    this.callers.stop();
    // Not released one by one: each body would copy out its surviving half on the way, and all of
    // it is garbage together once the machines go.
    for (const iface of this.machines.values()) unexportPath(this.bus, iface.objectPath);
    this.machines.clear();
    this.machinesByPath.clear();
    this.sortedNames = [];
    this.dropReplies();
    unexportPath(this.bus, MANAGER_PATH);
  }

  private readonly onAdded = (record: MachineRecord) => this.guard('machineAdded', () => this.exportMachine(record, true));
  private readonly onChanged = (record: MachineRecord) => this.guard('machineChanged', () => this.exportMachine(record, true));
  private readonly onRemoved = (record: MachineRecord) => this.guard('machineRemoved', () => this.unexportMachine(record.name));
  private readonly onEvent = (event: AgentEvent) => this.guard('event', () => this.manager.MachineEvent(event));
  private readonly onJournaled = (event: AgentEvent) => this.guard('eventJournaled', () => this.manager.EventRecorded(event));
  // The drain, the agent's state and the libvirt connection show in the Manager's properties
  // only, never in a machine's.
  private readonly onManagerState = () => this.guard('managerState', () => this.manager.setValues(this.manager.currentProperties()));

  private listeners(): Array<[keyof MachineApiEvents, (...args: never[]) => void]> {
    return [
      ['machineAdded', this.onAdded],
      ['machineChanged', this.onChanged],
      ['machineRemoved', this.onRemoved],
      ['event', this.onEvent],
      ['eventJournaled', this.onJournaled],
      ['infoChanged', this.onManagerState],
    ];
  }

  private subscribe(): void {
    for (const [event, fn] of this.listeners()) this.api.on(event, fn as MachineApiEvents[typeof event]);
    this.host?.onDrainState(this.onManagerState);
  }

  private unsubscribe(): void {
    for (const [event, fn] of this.listeners()) this.api.off(event, fn as MachineApiEvents[typeof event]);
    this.host?.offDrainState(this.onManagerState);
  }

  /** A failure to publish must never propagate into the api's emitter. */
  private guard(what: string, fn: () => void): void {
    if (!this.started) return;
    try {
      fn();
    } catch (err) {
      this.logger.warn('D-Bus publish failed', { what, error: describeError(err) });
    }
  }

  /** Exports a new machine (with signals when `announce`) or updates an exported one. */
  private exportMachine(record: MachineRecord, announce: boolean): void {
    const defaultGrace = this.defaultGrace;
    const existing = this.machines.get(record.name);
    if (existing) {
      const entry = existing.listEntry;
      if (existing.update(record, defaultGrace).length > 0) this.objectsReply = undefined;
      if (existing.listEntry !== entry) this.listReply = undefined;
      return;
    }
    const iface = new MachineInterface(this.api, record.name, this.callers);
    const path = iface.objectPath;
    iface.update(record, defaultGrace, false);
    this.bus.export(path, iface);
    this.machines.set(record.name, iface);
    this.machinesByPath.set(path, iface);
    this.sortedNames.splice(sortedIndexOf(this.sortedNames, record.name, itself), 0, record.name);
    this.dropReplies();
    if (announce) {
      this.objectManager.InterfacesAdded(path, { [MACHINE_INTERFACE]: iface.variants() });
      this.manager.MachineNew(record.name, path);
    }
  }

  private unexportMachine(name: string): void {
    const iface = this.machines.get(name);
    if (!iface) return;
    const path = iface.objectPath;
    this.machines.delete(name);
    this.machinesByPath.delete(path);
    const at = sortedIndexOf(this.sortedNames, name, itself);
    if (this.sortedNames[at] === name) this.sortedNames.splice(at, 1);
    this.dropReplies();
    iface.releaseElements();
    unexportPath(this.bus, path);
    this.objectManager.InterfacesRemoved(path, [MACHINE_INTERFACE]);
    this.manager.MachineRemoved(name, path);
  }

  private dropReplies(): void {
    this.listReply = undefined;
    this.objectsReply = undefined;
  }

  /** What the manager's reads answer from: the exported objects, never the store. */
  private readonly directory: MachineDirectory = {
    list: () => {
      // Names and the state and power words never fail the guard's check; were one to, the
      // plain reply lets the guard refuse it as it refuses any other.
      const ifaces = this.sortedNames.map((name) => this.machines.get(name)!);
      if (ifaces.some((iface) => iface.listEntryProblem)) return ifaces.map((iface) => iface.listEntry);
      this.listReply ??= new MarshalledArray(LIST_SIGNATURE, ifaces.map((iface) => iface.listElement()));
      return this.listReply;
    },
    pathOf: (name) => this.machines.get(name)?.objectPath,
  };

  /** One machine that cannot be encoded is left out (and logged), so the others still reach everyone. */
  private managedObjects(): MarshalledArray {
    if (this.objectsReply) return this.objectsReply;
    const elements: MarshalledElement[] = [];
    for (const iface of this.machines.values()) {
      if (iface.encodingProblem) {
        this.logger.error('machine left out of GetManagedObjects: a property cannot be encoded', { machine: iface.machineName, error: iface.encodingProblem });
        continue;
      }
      elements.push(iface.managedElement());
    }
    this.objectsReply = new MarshalledArray(MANAGED_OBJECTS_SIGNATURE, elements);
    return this.objectsReply;
  }

  /** What is exported where, for the standard answers and the inbound judge. */
  private readonly objects: ObjectDirectory = {
    interfacesAt: (path): Record<string, ExportedInterface> | undefined => {
      if (path === MANAGER_PATH) return { [MANAGER_INTERFACE]: this.manager, [OBJECT_MANAGER_INTERFACE]: this.objectManager };
      if (!path.startsWith(MACHINE_PATH_PREFIX)) return undefined;
      const iface = this.machineAt(path);
      return iface ? { [MACHINE_INTERFACE]: iface } : undefined;
    },
    // The nodes above our objects: /, /org, and /org/vmkeeper1/machine while machines exist.
    hasChildren: (path) => path === '/' || (MACHINE_PATH_PREFIX.startsWith(`${path}/`) && (`${path}/` !== MACHINE_PATH_PREFIX || this.machines.size > 0)),
  };

  private machineAt(path: string): MachineInterface | undefined {
    return this.machinesByPath.get(path);
  }

  /** Only while our objects are exported: a stopped service lets dbus-next answer as it would. */
  private readonly judgeInbound: InboundJudge = (call) => (this.started ? this.judge(call) : undefined);

  private readonly answerStandard = standardAnswers((m) => this.bus.send(m), this.objects);
}

const itself = (name: string) => name;

// dbus-next's unexport(path, iface) drops the whole object after the first interface (it tests
// `interfaces.length` on a plain object), so only ever unexport whole paths.
function unexportPath(bus: MessageBus, path: string): void {
  (bus.unexport as (path: string) => void).call(bus, path);
}
