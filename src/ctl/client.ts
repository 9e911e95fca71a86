import { Message, MessageType, type MessageBus } from 'dbus-next';
import { connectBus, onBusLost } from '../dbus/bus-address.js';
import { MANAGER_PATH } from '../machine/names.js';
import { eventFromTuple, machineFromProperties, sequencedEventFromTuple, managerFromProperties, partialMachine, shutdownRecordFromTuple } from './dbus-values.js';
import { CtlError, ExitCode, firstLine } from './errors.js';
import type { AgentEvent, AgentSignal, EventPage, MachineInfo, ManagerInfo, ShutdownRecordSummary, Subscription, VmkeeperClient } from './model.js';

// The CLI's only way to the agent: org.vmkeeper1 over D-Bus (low-level dbus-next messages, so no
// introspection round trip and no proxy objects).

// The agent's copies live in src/dbus/*, whose modules would pull the agent's exporting code into the CLI.
const BUS_NAME = 'org.vmkeeper1';
const MANAGER_INTERFACE = 'org.vmkeeper1.Manager';
const MACHINE_INTERFACE = 'org.vmkeeper1.Machine';
const PROPERTIES = 'org.freedesktop.DBus.Properties';
const OBJECT_MANAGER = 'org.freedesktop.DBus.ObjectManager';
const DBUS = { destination: 'org.freedesktop.DBus', path: '/org/freedesktop/DBus', interface: 'org.freedesktop.DBus' };

const CALL_TIMEOUT_MS = 25_000;

export class DBusClient implements VmkeeperClient {
  private readonly listeners = new Set<(signal: AgentSignal) => void>();
  private matchesAdded = false;
  private closed = false;

  constructor(private readonly bus: MessageBus, private readonly callTimeoutMs = CALL_TIMEOUT_MS) {
    bus.on('message', (msg: Message) => this.onMessage(msg));
    // A broken connection must become a clean report, never an unhandled 'error' event.
    bus.on('error', (err: unknown) => this.lost(err instanceof Error ? err.message : String(err)));
    onBusLost(bus, (reason) => this.lost(reason));
  }

  static async connect(address: string): Promise<DBusClient> {
    let bus: MessageBus;
    try {
      bus = await connectBus(address);
    } catch (err) {
      throw new CtlError(`cannot connect to D-Bus at ${address}: ${connectFailure(err)}`, ExitCode.AgentNotRunning);
    }
    return new DBusClient(bus);
  }

  async listMachines(): Promise<MachineInfo[]> {
    const [objects] = (await this.call(MANAGER_PATH, OBJECT_MANAGER, 'GetManagedObjects')) as [Record<string, Record<string, Record<string, unknown>>>];
    const machines: MachineInfo[] = [];
    for (const [path, interfaces] of Object.entries(objects ?? {})) {
      const props = interfaces[MACHINE_INTERFACE];
      if (props) machines.push(machineFromProperties(path, props));
    }
    return machines.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  async machine(name: string): Promise<MachineInfo> {
    const [path] = (await this.manager('GetMachine', 's', [name])) as [string];
    try {
      const [props] = (await this.call(path, PROPERTIES, 'GetAll', 's', [MACHINE_INTERFACE])) as [Record<string, unknown>];
      return machineFromProperties(path, props);
    } catch (err) {
      // The machine may vanish between the two calls (e.g. a delete with grace 0): ask again so
      // the caller sees NoSuchMachine rather than the bus's "path not exported".
      await this.manager('GetMachine', 's', [name]);
      throw err;
    }
  }

  async describeMachine(name: string): Promise<string> {
    return ((await this.manager('DescribeMachine', 's', [name])) as [string])[0];
  }

  async createMachine(name: string, specJson: string): Promise<string> {
    return ((await this.manager('CreateMachine', 'ss', [name, specJson])) as [string])[0];
  }

  async deleteMachine(name: string, graceSec?: number): Promise<void> {
    if (graceSec === undefined) await this.manager('DeleteMachine', 's', [name]);
    else await this.manager('DeleteMachineWithGracePeriod', 'su', [name, graceSec]);
  }

  async setMachinePower(name: string, power: 'on' | 'off'): Promise<void> {
    await this.manager('SetMachinePower', 'ss', [name, power]);
  }

  async setMachineAnnotations(name: string, annotations: Record<string, string>): Promise<void> {
    await this.manager('SetMachineAnnotations', 'sa{ss}', [name, annotations]);
  }

  async setMachineAnnotationsIfVersion(name: string, annotations: Record<string, string>, expected: number): Promise<void> {
    await this.manager('SetMachineAnnotationsIfVersion', 'sa{ss}t', [name, annotations, BigInt(expected)]);
  }

  async listEventsSince(after: number, machine = ''): Promise<EventPage> {
    const [events, next] = (await this.manager('ListEventsSince', 'ts', [BigInt(after), machine])) as [unknown[][], unknown];
    return { events: (events ?? []).map(sequencedEventFromTuple), next: Number(next) };
  }

  async listEvents(): Promise<AgentEvent[]> {
    const [events] = (await this.manager('ListEvents')) as [unknown[][]];
    return (events ?? []).map(eventFromTuple);
  }

  async managerInfo(): Promise<ManagerInfo> {
    const [props] = (await this.call(MANAGER_PATH, PROPERTIES, 'GetAll', 's', [MANAGER_INTERFACE])) as [Record<string, unknown>];
    return managerFromProperties(props);
  }

  async drain(): Promise<void> {
    await this.manager('Drain');
  }

  async undrain(): Promise<void> {
    await this.manager('Undrain');
  }

  async listShutdownRecords(): Promise<ShutdownRecordSummary[]> {
    const [rows] = (await this.manager('ListShutdownRecords')) as [unknown[][]];
    return (rows ?? []).map(shutdownRecordFromTuple);
  }

  async describeShutdownRecord(id: string): Promise<string> {
    return ((await this.manager('DescribeShutdownRecord', 's', [id])) as [string])[0];
  }

  async subscribe(listener: (signal: AgentSignal) => void): Promise<Subscription> {
    if (!this.matchesAdded) {
      // The bus resolves sender='org.vmkeeper1' to the agent's unique name, so nobody can spoof it.
      await this.addMatch(`type='signal',sender='${BUS_NAME}',path_namespace='${MANAGER_PATH}'`);
      await this.addMatch(`type='signal',sender='${DBUS.destination}',interface='${DBUS.interface}',member='NameOwnerChanged',arg0='${BUS_NAME}'`);
      this.matchesAdded = true;
    }
    this.listeners.add(listener);
    return { close: () => this.listeners.delete(listener) };
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.listeners.clear();
    try {
      this.bus.disconnect();
    } catch {
      // already gone
    }
  }

  private addMatch(rule: string): Promise<unknown[]> {
    return this.call(DBUS.path, DBUS.interface, 'AddMatch', 's', [rule], DBUS.destination);
  }

  private manager(member: string, signature = '', body: unknown[] = []): Promise<unknown[]> {
    return this.call(MANAGER_PATH, MANAGER_INTERFACE, member, signature, body);
  }

  private async call(path: string, iface: string, member: string, signature = '', body: unknown[] = [], destination = BUS_NAME): Promise<unknown[]> {
    const message = new Message({ destination, path, interface: iface, member, signature, body });
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new CtlError('vmkeeperd did not answer in time', ExitCode.Failure)), this.callTimeoutMs);
    });
    try {
      const reply = await Promise.race([this.bus.call(message), timeout]);
      return reply?.body ?? [];
    } finally {
      clearTimeout(timer);
    }
  }

  private onMessage(msg: Message): void {
    if (msg.type !== MessageType.SIGNAL || this.listeners.size === 0) return;
    const signal = decodeSignal(msg);
    if (signal) this.emit(signal);
  }

  private lost(reason: string): void {
    if (this.closed) return;
    this.emit({ kind: 'disconnected', reason: firstLine(reason) });
  }

  private emit(signal: AgentSignal): void {
    for (const listener of [...this.listeners]) listener(signal);
  }
}

export function decodeSignal(msg: { interface?: string; member?: string; path?: string; body: unknown[] }): AgentSignal | undefined {
  const body = msg.body;
  if (msg.interface === MANAGER_INTERFACE) {
    if (msg.member === 'MachineEvent') return { kind: 'event', event: eventFromTuple(body) };
    if (msg.member === 'EventRecorded') return { kind: 'sequenced-event', event: sequencedEventFromTuple(body) };
    if (msg.member === 'MachineNew') return { kind: 'machine-new', name: String(body[0]), path: String(body[1]) };
    if (msg.member === 'MachineRemoved') return { kind: 'machine-removed', name: String(body[0]), path: String(body[1]) };
    return undefined;
  }
  if (msg.interface === PROPERTIES && msg.member === 'PropertiesChanged' && body[0] === MACHINE_INTERFACE) {
    return { kind: 'machine-changed', path: msg.path ?? '', changed: partialMachine(body[1] as Record<string, unknown>) };
  }
  if (msg.interface === DBUS.interface && msg.member === 'NameOwnerChanged' && body[0] === BUS_NAME && body[2] === '') {
    return { kind: 'agent-gone' };
  }
  if (msg.interface === DBUS.interface && msg.member === 'NameOwnerChanged' && body[0] === BUS_NAME && body[2] !== '') {
    return { kind: 'agent-back' };
  }
  return undefined;
}

const SOCKET_ERRORS: Record<string, string> = {
  ENOENT: 'no bus socket there (is dbus-daemon running?)',
  ECONNREFUSED: 'connection refused (is dbus-daemon running?)',
  EACCES: 'permission denied on the bus socket',
  ETIMEDOUT: 'timed out',
};

/** The socket library's errors read like "ENOENT, USocket socket '../src/uwrap.cc:525'": name the cause instead. */
export function connectFailure(err: unknown): string {
  const text = firstLine(err instanceof Error ? err.message : String(err));
  const code = /\b(E[A-Z]{3,})\b/.exec(text)?.[1];
  if (code && SOCKET_ERRORS[code]) return SOCKET_ERRORS[code];
  return text.replace(/^cannot connect to D-Bus at \S+: /, '');
}
