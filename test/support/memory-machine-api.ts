import { EventEmitter } from 'node:events';
import { randomUUID } from 'node:crypto';
import { AgentError, machineExists, noSuchMachine } from '../../src/machine/errors.js';
import { domainNameFor, validateMachineName } from '../../src/machine/names.js';
import { RECORD_API_VERSION, cloneRecord, newStatus, splitSpec, type MachineRecord } from '../../src/machine/record.js';
import { DEFAULT_SPEC_LIMITS, parseAnnotations, parseMachineSpec, parsePower, type SpecLimits } from '../../src/machine/spec.js';
import type { AgentEvent, MachineApi, MachineApiEvents, ManagerInfo } from '../../src/service/api.js';

// An in-memory MachineApi for D-Bus edge tests: no hypervisor, deletion completes when the test
// says so (finishDelete), and faults can be injected per method.

export const DEFAULT_INFO: ManagerInfo = {
  version: '0.1.0-test',
  state: 'running',
  libvirtUri: 'test:///default',
  libvirtConnected: true,
  defaultGracePeriodSec: 60,
  sweepIntervalSec: 5,
  shutdownRetryIntervalSec: 10,
  hostShutdownTimeoutSec: 120,
};

type Method = 'create' | 'get' | 'list' | 'delete' | 'setPower' | 'setAnnotations' | 'events';

export interface MemoryMachineApiOptions {
  info?: Partial<ManagerInfo>;
  limits?: SpecLimits;
  /** Milliseconds since the epoch; inject to make timestamps predictable. */
  now?: () => number;
}

export class MemoryMachineApi implements MachineApi {
  readonly records = new Map<string, MachineRecord>();
  readonly eventLog: AgentEvent[] = [];
  private readonly emitter = new EventEmitter();
  private currentInfo: ManagerInfo;
  private readonly limits: SpecLimits;
  private readonly now: () => number;
  private readonly faults = new Map<Method, unknown>();

  constructor(options: MemoryMachineApiOptions = {}) {
    this.currentInfo = { ...DEFAULT_INFO, ...options.info };
    this.limits = options.limits ?? { ...DEFAULT_SPEC_LIMITS, imageDirectories: ['/var/lib/vmkeeper/images'] };
    this.now = options.now ?? Date.now;
  }

  /** The next call of `method` throws `error` (any value: AgentError, Error with a stack, string). */
  failNext(method: Method, error: unknown): void {
    this.faults.set(method, error);
  }

  private fault(method: Method): void {
    if (!this.faults.has(method)) return;
    const error = this.faults.get(method);
    this.faults.delete(method);
    throw error;
  }

  private mustGet(name: string): MachineRecord {
    const record = this.records.get(name);
    if (!record) throw noSuchMachine(name);
    return record;
  }

  /** Mutates a stored record, bumps its resourceVersion and emits machineChanged. */
  update(name: string, mutate: (r: MachineRecord) => void): MachineRecord {
    const record = this.mustGet(name);
    mutate(record);
    record.resourceVersion += 1;
    this.emit('machineChanged', cloneRecord(record));
    return cloneRecord(record);
  }

  /** Completes a deletion: the record goes away and machineRemoved fires. */
  finishDelete(name: string): void {
    const record = this.mustGet(name);
    this.records.delete(name);
    this.emit('machineRemoved', cloneRecord(record));
    this.recordEvent({ machine: name, type: 'normal', reason: 'Deleted', message: `machine ${name} deleted` });
  }

  recordEvent(event: Omit<AgentEvent, 'timestamp'> & { timestamp?: number }): AgentEvent {
    const full: AgentEvent = { timestamp: this.now(), ...event };
    this.eventLog.push(full);
    this.emit('event', full);
    return full;
  }

  setInfo(change: Partial<ManagerInfo>): void {
    this.currentInfo = { ...this.currentInfo, ...change };
    this.emit('infoChanged', { ...this.currentInfo });
  }

  async create(name: string, specJson: string): Promise<MachineRecord> {
    this.fault('create');
    validateMachineName(name);
    const { spec, annotations } = splitSpec(parseMachineSpec(specJson, this.limits));
    if (this.records.has(name)) throw machineExists(name);
    const record: MachineRecord = {
      apiVersion: RECORD_API_VERSION,
      name,
      uuid: randomUUID(),
      domainName: domainNameFor(name),
      createdAt: this.now(),
      deletionTimestamp: 0,
      deletionGracePeriodSec: 0,
      resourceVersion: 1,
      annotations,
      spec,
      status: newStatus(),
    };
    this.records.set(name, record);
    this.emit('machineAdded', cloneRecord(record));
    return cloneRecord(record);
  }

  get(name: string): MachineRecord {
    this.fault('get');
    return cloneRecord(this.mustGet(name));
  }

  list(): MachineRecord[] {
    this.fault('list');
    return [...this.records.values()].sort((a, b) => a.name.localeCompare(b.name)).map(cloneRecord);
  }

  async delete(name: string, graceSec?: number): Promise<void> {
    this.fault('delete');
    const record = this.mustGet(name);
    const now = this.now();
    const grace = graceSec ?? record.spec.gracePeriodSec ?? this.currentInfo.defaultGracePeriodSec;
    const deadline = now + grace * 1000;
    if (record.deletionTimestamp > 0 && (graceSec === undefined || deadline >= record.status.forceStopAt)) return;
    this.update(name, (r) => {
      if (r.deletionTimestamp === 0) r.deletionTimestamp = now;
      r.deletionGracePeriodSec = grace;
      r.status.state = 'terminating';
      r.status.shutdownRequestedAt ||= now;
      r.status.forceStopAt = deadline;
      r.status.gracePeriodSec = grace;
    });
    this.recordEvent({ machine: name, type: 'normal', reason: 'ShutdownRequested', message: `deleting ${name}, grace ${grace}s` });
  }

  async setPower(name: string, power: string): Promise<void> {
    this.fault('setPower');
    const record = this.mustGet(name);
    const wanted = parsePower(power);
    if (record.deletionTimestamp > 0) throw new AgentError('MachineTerminating', `machine "${name}" is being deleted`);
    if (record.spec.power === wanted) return;
    this.update(name, (r) => {
      r.spec.power = wanted;
      r.status.state = wanted === 'on' ? 'running' : 'stopped';
    });
  }

  async setAnnotations(name: string, annotations: Record<string, string>): Promise<void> {
    this.fault('setAnnotations');
    this.mustGet(name);
    const parsed = parseAnnotations(annotations);
    this.update(name, (r) => {
      r.annotations = parsed;
    });
  }

  events(): AgentEvent[] {
    this.fault('events');
    return [...this.eventLog];
  }

  info(): ManagerInfo {
    return { ...this.currentInfo };
  }

  on<E extends keyof MachineApiEvents>(event: E, listener: MachineApiEvents[E]): void {
    this.emitter.on(event, listener);
  }

  off<E extends keyof MachineApiEvents>(event: E, listener: MachineApiEvents[E]): void {
    this.emitter.off(event, listener);
  }

  /** How many listeners the D-Bus edge left behind (0 after stop()). */
  listenerCount(): number {
    return this.emitter.eventNames().reduce((n, e) => n + this.emitter.listenerCount(e), 0);
  }

  private emit<E extends keyof MachineApiEvents>(event: E, ...args: Parameters<MachineApiEvents[E]>): void {
    this.emitter.emit(event, ...args);
  }
}
