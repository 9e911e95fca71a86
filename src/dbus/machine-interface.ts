import { describeRecord } from '../machine/describe.js';
import { specView, type MachineRecord } from '../machine/record.js';
import { machineObjectPath } from '../machine/names.js';
import { lifecycleOf } from '../machine/spec.js';
import type { MachineApi } from '../service/api.js';
import { mapErrors } from './errors.js';
import type { CallerIdentity } from './caller-identity.js';
import { asCaller } from './journal-members.js';
import { describeStructured, type VariantDict } from './structured.js';
import type { InterfacesAndProperties } from './object-manager.js';
import { checkOnce } from './outbound-guard.js';
import { marshalElement, type MarshalledElement } from './marshalled.js';
import { SnapshotInterface, configureInterface, uint32, usec, type PropertyValues } from './interface-support.js';

// org.vmkeeper1.Machine: one exported object per machine record, fed by the api's change events.

export const MACHINE_INTERFACE = 'org.vmkeeper1.Machine';

/** The grace in force: the running shutdown's, else the spec's, else the agent default. */
function gracePeriodSec(r: MachineRecord, defaultGraceSec: number): number {
  if (r.status.shutdownRequestedAt > 0) return r.status.gracePeriodSec;
  return r.spec.gracePeriodSec ?? defaultGraceSec;
}

export function machineProperties(r: MachineRecord, defaultGraceSec: number): PropertyValues {
  const lifecycle = lifecycleOf(r.spec);
  return {
    Name: r.name,
    Uuid: r.uuid,
    DomainName: r.domainName,
    State: r.status.state,
    Power: r.spec.power,
    CreatedAt: usec(r.createdAt),
    DeletionTimestamp: usec(r.deletionTimestamp),
    ShutdownRequestedAt: usec(r.status.shutdownRequestedAt),
    ForceStopAt: usec(r.status.forceStopAt),
    GracePeriodSec: uint32(gracePeriodSec(r, defaultGraceSec)),
    // A plain object: dbus-next marshals a{ss} only from objects whose constructor is Object.
    Annotations: { ...r.annotations },
    Spec: JSON.stringify(specView(r)),
    ResourceVersion: BigInt(Math.max(0, Math.trunc(r.resourceVersion))),
    HostShutdownAction: lifecycle.hostShutdownAction,
    ShutdownPriority: uint32(lifecycle.shutdownPriority),
    StartPriority: uint32(lifecycle.startPriority),
  };
}

/** `element` while it was marshalled from `source`; a stale one is released and gives undefined. */
function keptIf<S>(element: MarshalledElement<S> | undefined, source: S): MarshalledElement<S> | undefined {
  if (element?.source === source) return element;
  element?.release();
  return undefined;
}

export const LIST_SIGNATURE = 'a(ssso)';
export const MANAGED_OBJECTS_SIGNATURE = 'a{oa{sa{sv}}}';

/** One ListMachines entry: name, state, power, object path. */
export type MachineListEntry = readonly [string, string, string, string];

export class MachineInterface extends SnapshotInterface {
  readonly objectPath: string;
  /** This machine's ListMachines entry, frozen and checked; a new array only when state or power change. */
  listEntry: MachineListEntry;
  /** Why listEntry cannot go on the bus, or undefined (names and state words are always fine). */
  listEntryProblem: string | undefined;

  constructor(
    private readonly api: MachineApi,
    readonly machineName: string,
    private readonly callers?: CallerIdentity,
  ) {
    super(MACHINE_INTERFACE);
    this.objectPath = machineObjectPath(machineName);
    this.listEntry = this.entry('', '');
  }

  /**
   * Takes a new record; emits PropertiesChanged for what differs unless `emit` is false. Returns
   * the names of the properties that changed.
   */
  update(record: MachineRecord, defaultGraceSec: number, emit = true): string[] {
    const changed = this.setValues(machineProperties(record, defaultGraceSec), emit);
    const [, state, power] = this.listEntry;
    if (record.status.state !== state || record.spec.power !== power) this.listEntry = this.entry(record.status.state, record.spec.power);
    // Stale bytes are let go now, not at the next list: after a burst of writes they would be
    // most machines', and would keep the old reply body alive.
    this.objectBytes = keptIf(this.objectBytes, this.values);
    this.listBytes = keptIf(this.listBytes, this.listEntry);
    return changed;
  }

  /** The machine is gone: its elements leave the reply bodies they are in. */
  releaseElements(): void {
    this.objectBytes?.release();
    this.listBytes?.release();
    this.objectBytes = this.listBytes = undefined;
  }

  private listBytes: MarshalledElement<MachineListEntry> | undefined;
  /** managedElement() of the snapshot `values`; a new snapshot only when a property changes. */
  private objectBytes: MarshalledElement<PropertyValues> | undefined;

  /** listEntry marshalled as one element of ListMachines' a(ssso), redone only when it changes. */
  listElement(): MarshalledElement {
    this.listBytes = keptIf(this.listBytes, this.listEntry) ?? marshalElement(LIST_SIGNATURE, [this.listEntry], this.listEntry);
    return this.listBytes;
  }

  /**
   * This machine marshalled as one entry of GetManagedObjects' a{oa{sa{sv}}} (its one interface
   * and all properties), redone only when a property changes.
   */
  managedElement(): MarshalledElement {
    // Not checked again: managedObjects() leaves out a machine whose snapshot has an encodingProblem.
    this.objectBytes = keptIf(this.objectBytes, this.values) ??
      marshalElement(MANAGED_OBJECTS_SIGNATURE, { [this.objectPath]: { [MACHINE_INTERFACE]: this.buildVariants() } satisfies InterfacesAndProperties }, this.values);
    return this.objectBytes;
  }

  private entry(state: string, power: string): MachineListEntry {
    const entry: MachineListEntry = [this.machineName, state, power, this.objectPath];
    this.listEntryProblem = checkOnce(entry);
    return entry;
  }

  Delete(): Promise<void> {
    return asCaller(this.callers, (o) => this.api.delete(this.machineName, undefined, o));
  }

  DeleteWithGracePeriod(seconds: number): Promise<void> {
    return asCaller(this.callers, (o) => this.api.delete(this.machineName, seconds, o));
  }

  SetPower(power: string): Promise<void> {
    return asCaller(this.callers, (o) => this.api.setPower(this.machineName, power, o));
  }

  Describe(): Promise<string> {
    return mapErrors(() => describeRecord(this.api.get(this.machineName)));
  }

  DescribeStructured(): Promise<VariantDict> {
    return mapErrors(() => describeStructured(this.api.get(this.machineName)));
  }
}

configureInterface(MachineInterface, {
  properties: {
    Name: 's',
    Uuid: 's',
    DomainName: 's',
    State: 's',
    Power: 's',
    CreatedAt: 't',
    DeletionTimestamp: 't',
    ShutdownRequestedAt: 't',
    ForceStopAt: 't',
    GracePeriodSec: 'u',
    Annotations: 'a{ss}',
    Spec: 's',
    ResourceVersion: 't',
    HostShutdownAction: 's',
    ShutdownPriority: 'u',
    StartPriority: 'u',
  },
  methods: {
    Delete: { args: [] },
    DeleteWithGracePeriod: { in: 'u', args: ['seconds'] },
    SetPower: { in: 's', args: ['power'] },
    Describe: { out: 's', args: ['json'] },
    DescribeStructured: { out: 'a{sv}', args: ['machine'] },
  },
  signals: {},
});
