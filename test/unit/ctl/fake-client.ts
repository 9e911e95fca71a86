import { DBusError } from 'dbus-next';
import { machineFromProperties } from '../../../src/ctl/dbus-values.js';
import { domainNameFor, machineObjectPath } from '../../../src/machine/names.js';
import type { AgentEvent, AgentSignal, MachineInfo, ManagerInfo, ShutdownRecordView, Subscription, VmkeeperClient } from '../../../src/ctl/model.js';

// An in-memory VmkeeperClient: tests set machines, script what a call does, and emit signals.

export function machine(name: string, over: Partial<MachineInfo> = {}): MachineInfo {
  return {
    ...machineFromProperties(machineObjectPath(name), {}),
    name,
    uuid: `uuid-${name}`,
    domainName: domainNameFor(name),
    state: 'running',
    power: 'on',
    spec: '{}',
    resourceVersion: 1,
    ...over,
  };
}

export const noSuchMachine = (name: string) => new DBusError('org.vmkeeper1.Error.NoSuchMachine', `no machine named "${name}"`);

export class FakeClient implements VmkeeperClient {
  machines = new Map<string, MachineInfo>();
  events: AgentEvent[] = [];
  calls: string[] = [];
  closed = false;
  subscribedAt = -1;
  private listeners = new Set<(s: AgentSignal) => void>();
  info: ManagerInfo = {
    version: '0.1.0',
    state: 'running',
    libvirtUri: 'test:///default',
    libvirtConnected: true,
    defaultGracePeriodSec: 60,
    sweepIntervalSec: 10,
    shutdownRetryIntervalSec: 5,
    hostShutdownTimeoutSec: 120,
    drainState: 'none',
  };
  /** What DescribeShutdownRecord knows, oldest first. */
  shutdownRecords: ShutdownRecordView[] = [];
  /** Runs inside Drain and Undrain, after they are recorded (e.g. to emit the run's events). */
  onDrain: () => void | Promise<void> = () => {};
  onUndrain: () => void | Promise<void> = () => {};
  /** Runs inside the mutating calls, after they are recorded: throw to fail them. */
  onDelete: (name: string, grace?: number) => void | Promise<void> = () => {};
  onPower: (name: string, power: 'on' | 'off') => void | Promise<void> = () => {};
  onCreate: (name: string, spec: string) => void | Promise<void> = () => {};
  failWith?: Error;

  add(m: MachineInfo): this {
    this.machines.set(m.name, m);
    return this;
  }

  emit(signal: AgentSignal): void {
    for (const l of [...this.listeners]) l(signal);
  }

  /** Updates a machine, bumps ResourceVersion and emits PropertiesChanged with the changes. */
  change(name: string, changed: Partial<MachineInfo>): void {
    const m = this.machines.get(name)!;
    const next = { ...m, ...changed, resourceVersion: m.resourceVersion + 1 };
    this.machines.set(name, next);
    this.emit({ kind: 'machine-changed', path: m.path, changed: { ...changed, resourceVersion: next.resourceVersion } });
  }

  /** Records an event with the next sequence and sends both signals, as the agent does. */
  event(name: string, reason: string, message: string, timestamp = 0, type = 'normal'): void {
    const e = { timestamp, machine: name, type, reason, message, sequence: this.events.length + 1, uid: '', call: '' };
    this.events.push(e);
    this.emit({ kind: 'event', event: e });
    this.emit({ kind: 'sequenced-event', event: e });
  }

  remove(name: string): void {
    const m = this.machines.get(name)!;
    this.machines.delete(name);
    this.emit({ kind: 'machine-removed', name, path: m.path });
  }

  private check(): void {
    if (this.failWith) throw this.failWith;
  }

  private get(name: string): MachineInfo {
    const m = this.machines.get(name);
    if (!m) throw noSuchMachine(name);
    return m;
  }

  async listMachines() {
    this.check();
    this.calls.push('listMachines');
    return [...this.machines.values()].sort((a, b) => a.name.localeCompare(b.name));
  }
  async machine(name: string) {
    this.check();
    this.calls.push(`machine ${name}`);
    return { ...this.get(name) };
  }
  async describeMachine(name: string) {
    this.check();
    const m = this.get(name);
    return JSON.stringify({ metadata: { name: m.name, uuid: m.uuid, annotations: m.annotations }, spec: JSON.parse(m.spec), status: { state: m.state, power: m.power, message: '' } });
  }
  async createMachine(name: string, spec: string) {
    this.check();
    this.calls.push(`create ${name} ${spec}`);
    await this.onCreate(name, spec);
    this.add(machine(name, { state: 'pending', spec }));
    return this.machines.get(name)!.path;
  }
  async deleteMachine(name: string, grace?: number) {
    this.check();
    this.calls.push(`delete ${name} ${grace ?? '-'}`);
    this.get(name);
    await this.onDelete(name, grace);
  }
  async setMachinePower(name: string, power: 'on' | 'off') {
    this.check();
    this.calls.push(`power ${name} ${power}`);
    this.get(name);
    await this.onPower(name, power);
  }
  async setMachineAnnotations(name: string, annotations: Record<string, string>) {
    this.check();
    this.calls.push(`annotate ${name} ${JSON.stringify(annotations)}`);
    this.machines.set(name, { ...this.get(name), annotations });
  }
  /** Runs before a compare-and-set annotation write is judged: change the machine to make it conflict. */
  beforeAnnotate: (name: string) => void = () => {};

  async setMachineAnnotationsIfVersion(name: string, annotations: Record<string, string>, expected: number) {
    this.check();
    this.calls.push(`annotate ${name} ${JSON.stringify(annotations)} @${expected}`);
    this.beforeAnnotate(name);
    const m = this.get(name);
    if (expected !== 0 && m.resourceVersion !== expected) {
      throw new DBusError('org.vmkeeper1.Error.Conflict', `machine "${name}" is at version ${m.resourceVersion}, not the expected ${expected}`);
    }
    this.machines.set(name, { ...m, annotations, resourceVersion: m.resourceVersion + 1 });
  }

  async listEventsSince(after: number, machineName?: string) {
    this.check();
    this.calls.push(`listEventsSince ${after}`);
    const all = this.events.map((e, i) => ({ ...e, sequence: e.sequence ?? i + 1 }));
    const last = all.at(-1)?.sequence ?? 0;
    const events = all.filter((e) => e.sequence > after && (machineName === undefined || e.machine === machineName));
    return { events, next: Math.max(last, after) };
  }

  async listEvents() {
    this.check();
    this.calls.push('listEvents');
    return [...this.events];
  }
  async managerInfo() {
    this.check();
    return this.info;
  }
  async drain() {
    this.check();
    this.calls.push('drain');
    await this.onDrain();
  }
  async undrain() {
    this.check();
    this.calls.push('undrain');
    await this.onUndrain();
  }
  async listShutdownRecords() {
    this.check();
    return this.shutdownRecords.map(({ id, kind, result, startedAt, finishedAt }) => ({ id, kind, result, startedAt, finishedAt }));
  }
  async describeShutdownRecord(id: string) {
    this.check();
    const r = this.shutdownRecords.find((x) => x.id === id);
    if (!r) throw new DBusError('org.vmkeeper1.Error.NoSuchShutdownRecord', `no shutdown record with id "${id}"`);
    return JSON.stringify(r);
  }
  async subscribe(listener: (s: AgentSignal) => void): Promise<Subscription> {
    this.check();
    this.calls.push('subscribe');
    this.listeners.add(listener);
    return { close: () => this.listeners.delete(listener) };
  }
  get subscribers(): number {
    return this.listeners.size;
  }
  close() {
    this.closed = true;
  }
}
