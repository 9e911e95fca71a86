import { describeRecord } from '../machine/describe.js';
import { specView, type MachineRecord } from '../machine/record.js';
import type { MachineApi } from '../service/api.js';
import { mapErrors } from './errors.js';
import { SnapshotInterface, configureInterface, uint32, usec, type PropertyValues } from './interface-support.js';

// org.vmkeeper1.Machine: one exported object per machine record, fed by the api's change events.

export const MACHINE_INTERFACE = 'org.vmkeeper1.Machine';

/** The grace in force: the running shutdown's, else the spec's, else the agent default. */
function gracePeriodSec(r: MachineRecord, defaultGraceSec: number): number {
  if (r.status.shutdownRequestedAt > 0) return r.status.gracePeriodSec;
  return r.spec.gracePeriodSec ?? defaultGraceSec;
}

export function machineProperties(r: MachineRecord, defaultGraceSec: number): PropertyValues {
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
  };
}

export class MachineInterface extends SnapshotInterface {
  constructor(
    private readonly api: MachineApi,
    readonly machineName: string,
  ) {
    super(MACHINE_INTERFACE);
  }

  /** Takes a new record; emits PropertiesChanged for what differs unless `emit` is false. */
  update(record: MachineRecord, defaultGraceSec: number, emit = true): string[] {
    return this.setValues(machineProperties(record, defaultGraceSec), emit);
  }

  Delete(): Promise<void> {
    return mapErrors(() => this.api.delete(this.machineName));
  }

  DeleteWithGracePeriod(seconds: number): Promise<void> {
    return mapErrors(() => this.api.delete(this.machineName, seconds));
  }

  SetPower(power: string): Promise<void> {
    return mapErrors(() => this.api.setPower(this.machineName, power));
  }

  Describe(): Promise<string> {
    return mapErrors(() => describeRecord(this.api.get(this.machineName)));
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
  },
  methods: {
    Delete: { args: [] },
    DeleteWithGracePeriod: { in: 'u', args: ['seconds'] },
    SetPower: { in: 's', args: ['power'] },
    Describe: { out: 's', args: ['json'] },
  },
  signals: {},
});
