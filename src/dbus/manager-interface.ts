import { copyAnnotations } from '../machine/annotations.js';
import { describeRecord } from '../machine/describe.js';
import { machineObjectPath } from '../machine/names.js';
import type { AgentEvent, MachineApi, ManagerInfo } from '../service/api.js';
import type { HostApi } from '../drain/host-api.js';
import type { DrainState } from '../drain/drain-controller.js';
import type { ShutdownRecord } from '../hostshutdown/stop-procedure.js';
import { AgentError } from '../machine/errors.js';
import { mapErrors } from './errors.js';
import type { CallerIdentity } from './caller-identity.js';
import { JOURNAL_METHODS, JOURNAL_SIGNALS, MAX_EVENTS_PAGE, asCaller, cursorOf, eventPageBody, machineFilter, sequencedEventBody } from './journal-members.js';
import { describeStructured, type VariantDict } from './structured.js';
import type { MachineListEntry } from './machine-interface.js';
import type { MarshalledArray } from './marshalled.js';
import { SnapshotInterface, configureInterface, uint32, usec, type PropertyValues } from './interface-support.js';

// org.vmkeeper1.Manager on /org/vmkeeper1 (docs/dbus-api.md). Every method goes through mapErrors.

export const MANAGER_INTERFACE = 'org.vmkeeper1.Manager';

export function managerProperties(info: ManagerInfo, drainState: DrainState): PropertyValues {
  return {
    Version: info.version,
    State: info.state,
    LibvirtUri: info.libvirtUri,
    LibvirtConnected: info.libvirtConnected,
    DefaultGracePeriodSec: uint32(info.defaultGracePeriodSec),
    SweepIntervalSec: uint32(info.sweepIntervalSec),
    ShutdownRetryIntervalSec: uint32(info.shutdownRetryIntervalSec),
    HostShutdownTimeoutSec: uint32(info.hostShutdownTimeoutSec),
    DrainState: drainState,
  };
}

/** ListShutdownRecords' row: (id, kind, result, startedAt usec, finishedAt usec). */
export function shutdownRecordRow(r: ShutdownRecord): [string, string, string, bigint, bigint] {
  return [r.id, r.kind, r.result, usec(r.startedAt), usec(r.finishedAt)];
}

/** An agent built without the host parts (some tests) still answers these members, by name. */
const noHost = () => new AgentError('NotSupported', 'this agent has no drain or shutdown records');

export function eventBody(e: AgentEvent): [bigint, string, string, string, string] {
  return [usec(e.timestamp), e.machine, e.type, e.reason, e.message];
}

/** The exported machine objects, kept by the D-Bus service: what reads answer from. */
export interface MachineDirectory {
  /** ListMachines' reply, sorted by name: marshalled, or as values. */
  list(): MarshalledArray | readonly MachineListEntry[];
  /** The object path of an exported machine, or undefined. */
  pathOf(name: string): string | undefined;
}

export class ManagerInterface extends SnapshotInterface {
  constructor(
    private readonly api: MachineApi,
    /** Without one, reads go to the api (and build every answer anew). */
    private readonly directory?: MachineDirectory,
    /** Who calls; without it events name no caller. */
    private readonly callers?: CallerIdentity,
    /** Drain and the shutdown records; without it they answer NotSupported and DrainState is "none". */
    private readonly host?: HostApi,
  ) {
    super(MANAGER_INTERFACE);
    this.setValues(this.currentProperties(), false);
  }

  /** Every property's value now: the api's info and the drain state. */
  currentProperties(): PropertyValues {
    return managerProperties(this.api.info(), this.host?.drainState() ?? 'none');
  }

  CreateMachine(name: string, spec: string): Promise<string> {
    return asCaller(this.callers, async (o) => machineObjectPath((await this.api.create(name, spec, o)).name));
  }

  GetMachine(name: string): Promise<string> {
    // An exported machine answers from the directory; anything else gets the api's error.
    return mapErrors(() => this.directory?.pathOf(name) ?? machineObjectPath(this.api.get(name).name));
  }

  ListMachines(): Promise<MarshalledArray | readonly MachineListEntry[]> {
    return mapErrors(() =>
      this.directory?.list() ?? this.api.list().map((r) => [r.name, r.status.state, r.spec.power, machineObjectPath(r.name)] as const),
    );
  }

  DescribeMachine(name: string): Promise<string> {
    return mapErrors(() => describeRecord(this.api.get(name)));
  }

  DescribeMachineStructured(name: string): Promise<VariantDict> {
    return mapErrors(() => describeStructured(this.api.get(name)));
  }

  DeleteMachine(name: string): Promise<void> {
    return asCaller(this.callers, (o) => this.api.delete(name, undefined, o));
  }

  DeleteMachineIfVersion(name: string, expected: bigint): Promise<void> {
    return asCaller(this.callers, (o) => this.api.delete(name, undefined, o), expected);
  }

  DeleteMachineWithGracePeriod(name: string, seconds: number): Promise<void> {
    return asCaller(this.callers, (o) => this.api.delete(name, seconds, o));
  }

  SetMachinePower(name: string, power: string): Promise<void> {
    return asCaller(this.callers, (o) => this.api.setPower(name, power, o));
  }

  SetMachinePowerIfVersion(name: string, power: string, expected: bigint): Promise<void> {
    return asCaller(this.callers, (o) => this.api.setPower(name, power, o), expected);
  }

  SetMachineAnnotations(name: string, annotations: Record<string, string>): Promise<void> {
    // dbus-next hands the dict over as a plain object: copy it to a prototype-free one first.
    return asCaller(this.callers, (o) => this.api.setAnnotations(name, copyAnnotations(annotations), o));
  }

  SetMachineAnnotationsIfVersion(name: string, annotations: Record<string, string>, expected: bigint): Promise<void> {
    return asCaller(this.callers, (o) => this.api.setAnnotations(name, copyAnnotations(annotations), o), expected);
  }

  Drain(): Promise<void> {
    return asCaller(this.callers, (o) => this.requireHost().drain(o));
  }

  Undrain(): Promise<void> {
    return asCaller(this.callers, (o) => this.requireHost().undrain(o));
  }

  ListShutdownRecords(): Promise<[string, string, string, bigint, bigint][]> {
    return mapErrors(() => (this.host?.shutdownRecords() ?? []).map(shutdownRecordRow));
  }

  DescribeShutdownRecord(id: string): Promise<string> {
    return mapErrors(() => JSON.stringify(this.requireHost().shutdownRecord(id), null, 2));
  }

  private requireHost(): HostApi {
    if (!this.host) throw noHost();
    return this.host;
  }

  ListEventsSince(after: bigint, machine: string): Promise<ReturnType<typeof eventPageBody>> {
    return mapErrors(() => eventPageBody(this.api.eventsSince(cursorOf(after), machineFilter(machine), MAX_EVENTS_PAGE)));
  }

  EventRecorded(event: AgentEvent): ReturnType<typeof sequencedEventBody> {
    return sequencedEventBody(event);
  }

  ListEvents(): Promise<[bigint, string, string, string, string][]> {
    return mapErrors(() => this.api.events().map(eventBody));
  }

  MachineNew(name: string, path: string): [string, string] {
    return [name, path];
  }

  MachineRemoved(name: string, path: string): [string, string] {
    return [name, path];
  }

  MachineEvent(event: AgentEvent): [bigint, string, string, string, string] {
    return eventBody(event);
  }
}

configureInterface(ManagerInterface, {
  properties: {
    Version: 's',
    State: 's',
    LibvirtUri: 's',
    LibvirtConnected: 'b',
    DefaultGracePeriodSec: 'u',
    SweepIntervalSec: 'u',
    ShutdownRetryIntervalSec: 'u',
    HostShutdownTimeoutSec: 'u',
    DrainState: 's',
  },
  methods: {
    CreateMachine: { in: 'ss', out: 'o', args: ['name', 'spec', 'path'] },
    GetMachine: { in: 's', out: 'o', args: ['name', 'path'] },
    ListMachines: { out: 'a(ssso)', args: ['machines'] },
    DescribeMachine: { in: 's', out: 's', args: ['name', 'json'] },
    DescribeMachineStructured: { in: 's', out: 'a{sv}', args: ['name', 'machine'] },
    DeleteMachine: { in: 's', args: ['name'] },
    DeleteMachineWithGracePeriod: { in: 'su', args: ['name', 'seconds'] },
    SetMachinePower: { in: 'ss', args: ['name', 'power'] },
    SetMachineAnnotations: { in: 'sa{ss}', args: ['name', 'annotations'] },
    ListEvents: { out: 'a(tssss)', args: ['events'] },
    ...JOURNAL_METHODS,
    Drain: { args: [] },
    Undrain: { args: [] },
    ListShutdownRecords: { out: 'a(ssstt)', args: ['records'] },
    DescribeShutdownRecord: { in: 's', out: 's', args: ['id', 'json'] },
  },
  signals: {
    MachineNew: { signature: 'so', args: ['name', 'path'] },
    MachineRemoved: { signature: 'so', args: ['name', 'path'] },
    MachineEvent: { signature: 'tssss', args: ['timestamp', 'name', 'type', 'reason', 'message'] },
    ...JOURNAL_SIGNALS,
  },
});
