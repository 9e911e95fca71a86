import { randomUUID } from 'node:crypto';
import { AgentError, machineTerminating, noSuchMachine, shuttingDown } from '../machine/errors.js';
import { domainNameFor, validateMachineName } from '../machine/names.js';
import {
  RECORD_API_VERSION,
  cloneRecord,
  isDeleting,
  newStatus,
  splitSpec,
  type MachineRecord,
} from '../machine/record.js';
import { parseAnnotations, parseMachineSpec, parsePower, type SpecLimits } from '../machine/spec.js';
import { sameJson } from '../machine/same-json.js';
import type { Clock } from '../lifecycle/clock.js';
import type { ImageChecker } from '../hypervisor/image-guard.js';
import type { AgentEvent, AgentState, CallOptions, EventPage, ManagerInfo, MachineApi, MachineApiEvents } from './api.js';
import { existingIfSame, requireVersion } from './preconditions.js';
import type { EventLog } from './event-log.js';
import type { ChangeEvent, MachineRecords } from './machine-records.js';

export interface MachineServiceOptions {
  records: MachineRecords;
  events: EventLog;
  clock: Clock;
  limits: SpecLimits;
  info: Omit<ManagerInfo, 'state' | 'libvirtConnected'>;
  /** Tells the reconciler and sweeper that a machine needs attention now. */
  kick: (name: string) => void;
  /** Resolves image paths on disk (symlinks, backing chains) before a record is stored. */
  images?: ImageChecker;
}

const MAX_GRACE_SEC = 24 * 3600;

/** The agent's use cases: validation, the deletion/power rules, and nothing about D-Bus or libvirt. */
export class MachineService implements MachineApi {
  private state: AgentState = 'starting';
  private libvirtConnected = false;

  constructor(private readonly o: MachineServiceOptions) {}

  async create(name: string, specJson: string, options: CallOptions = {}): Promise<MachineRecord> {
    validateMachineName(name);
    if (this.refusesNewWork()) throw shuttingDown();
    const { spec, annotations } = splitSpec(parseMachineSpec(specJson, this.o.limits));
    await this.o.images?.checkSpec(spec);
    const now = this.o.clock.now();
    const { record: stored, created } = await this.o.records.create(
      name,
      () => ({
        apiVersion: RECORD_API_VERSION,
        name,
        uuid: randomUUID(),
        domainName: domainNameFor(name),
        createdAt: now,
        deletionTimestamp: 0,
        deletionGracePeriodSec: 0,
        resourceVersion: 0,
        annotations,
        spec,
        status: newStatus(),
      }),
      (existing) => existingIfSame(existing, spec, annotations),
      () => ({ type: 'normal', reason: 'Created', message: `machine ${name} created`, actor: options.actor }),
    );
    if (created) this.o.kick(name);
    return cloneRecord(stored);
  }

  get(name: string): MachineRecord {
    // Frozen and shared, as list() hands them out: a read under write load copies nothing.
    return this.stored(name);
  }

  /** The stored record itself (not a copy: read it, never change it), or NoSuchMachine. */
  private stored(name: string): MachineRecord {
    validateMachineName(name);
    const record = this.o.records.get(name);
    if (!record) throw noSuchMachine(name);
    return record;
  }

  list(): MachineRecord[] {
    return this.o.records.list();
  }

  async delete(name: string, graceSec?: number, options: CallOptions = {}): Promise<void> {
    this.stored(name);
    if (graceSec !== undefined && (!Number.isInteger(graceSec) || graceSec < 0 || graceSec > MAX_GRACE_SEC)) {
      throw new AgentError('InvalidArgument', `grace period must be 0..${MAX_GRACE_SEC} seconds`);
    }
    const now = this.o.clock.now();
    let firstRequest = false;
    const deletionRequested = (r: MachineRecord): ChangeEvent | undefined =>
      firstRequest ? { type: 'normal', reason: 'DeletionRequested', message: `deletion requested with a grace period of ${r.status.gracePeriodSec}s`, actor: options.actor } : undefined;
    const updated = await this.o.records.update(name, (r) => {
      requireVersion(r, options.expectedVersion);
      const grace = graceSec ?? r.spec.gracePeriodSec ?? this.o.info.defaultGracePeriodSec;
      const deadline = now + grace * 1000;
      if (!isDeleting(r)) {
        firstRequest = true;
        r.deletionTimestamp = now;
        r.deletionGracePeriodSec = grace;
        // A power-off already under way keeps its deadline if that is sooner.
        r.status.forceStopAt = r.status.forceStopAt > 0 ? Math.min(r.status.forceStopAt, deadline) : deadline;
        r.status.gracePeriodSec = grace;
        r.status.state = 'terminating';
      } else if (graceSec !== undefined && deadline < r.status.forceStopAt) {
        // Only an explicit, shorter grace moves the deadline, and only earlier.
        r.status.forceStopAt = deadline;
        r.deletionGracePeriodSec = grace;
        r.status.gracePeriodSec = grace;
      }
    }, deletionRequested);
    if (!updated) throw noSuchMachine(name);
    this.o.kick(name);
  }

  async setPower(name: string, power: string, options: CallOptions = {}): Promise<void> {
    const desired = parsePower(power, 'power');
    const current = this.stored(name);
    if (isDeleting(current)) throw machineTerminating(name);
    const now = this.o.clock.now();
    let changed = false;
    const powerChanged = (): ChangeEvent | undefined => (changed ? { type: 'normal', reason: 'PowerChanged', message: `power set to ${desired}`, actor: options.actor } : undefined);
    const updated = await this.o.records.update(name, (r) => {
      if (isDeleting(r)) throw machineTerminating(name);
      requireVersion(r, options.expectedVersion);
      if (r.spec.power === desired) return;
      changed = true;
      r.spec.power = desired;
      if (desired === 'off') {
        const grace = r.spec.gracePeriodSec ?? this.o.info.defaultGracePeriodSec;
        r.status.forceStopAt = now + grace * 1000;
        r.status.gracePeriodSec = grace;
        r.status.state = 'stopping';
      } else {
        // Powering on cancels a power-off in progress; the reconciler starts the domain.
        r.status.shutdownRequestedAt = 0;
        r.status.forceStopAt = 0;
        r.status.lastShutdownSentAt = 0;
        r.status.forceStoppedAt = 0;
        r.status.gracePeriodSec = 0;
        if (r.status.state === 'stopped' || r.status.state === 'stopping') r.status.state = 'pending';
      }
    }, powerChanged);
    if (!updated) throw noSuchMachine(name);
    this.o.kick(name);
  }

  async setAnnotations(name: string, annotations: Record<string, string>, options: CallOptions = {}): Promise<void> {
    const parsed = parseAnnotations(annotations);
    this.stored(name);
    let changed = false;
    const annotationsChanged = (): ChangeEvent | undefined =>
      changed ? { type: 'normal', reason: 'AnnotationsChanged', message: `annotations replaced (${Object.keys(parsed).length} keys)`, actor: options.actor } : undefined;
    const updated = await this.o.records.update(name, (r) => {
      requireVersion(r, options.expectedVersion);
      changed = !sameJson(r.annotations, parsed);
      r.annotations = parsed;
    }, annotationsChanged);
    if (!updated) throw noSuchMachine(name);
  }

  events(): AgentEvent[] {
    return this.o.events.list();
  }

  eventsSince(after: number, machine: string | undefined, limit: number): EventPage {
    return this.o.events.journal.since(after, machine, limit);
  }

  info(): ManagerInfo {
    return { ...this.o.info, state: this.state, libvirtConnected: this.libvirtConnected };
  }

  setAgentState(state: AgentState): void {
    if (state === this.state) return;
    this.state = state;
    this.o.records.emitter.emit('infoChanged', this.info());
  }

  /** A config reload changed a value the Manager shows (e.g. HostShutdownTimeoutSec). */
  updateInfo(patch: Partial<Pick<ManagerInfo, 'hostShutdownTimeoutSec'>>): void {
    Object.assign(this.o.info, patch);
    this.o.records.emitter.emit('infoChanged', this.info());
  }

  setLibvirtConnected(connected: boolean): void {
    if (connected === this.libvirtConnected) return;
    this.libvirtConnected = connected;
    if (this.state === 'running' || this.state === 'degraded') this.state = connected ? 'running' : 'degraded';
    this.o.records.emitter.emit('infoChanged', this.info());
  }

  on<E extends keyof MachineApiEvents>(event: E, listener: MachineApiEvents[E]): void {
    this.o.records.emitter.on(event, listener);
  }

  off<E extends keyof MachineApiEvents>(event: E, listener: MachineApiEvents[E]): void {
    this.o.records.emitter.off(event, listener);
  }

  private refusesNewWork(): boolean {
    return this.state === 'stopping' || this.state === 'host-shutdown';
  }
}
