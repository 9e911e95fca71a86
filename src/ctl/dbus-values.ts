import type { AgentEvent, MachineInfo, ManagerInfo, ShutdownRecordSummary } from './model.js';

// D-Bus values (Variants, bigint usec) -> the plain model. Pure, so it is unit-tested directly.

type Props = Record<string, unknown>;

/** Unwraps dbus-next Variants ({signature, value}) one level. */
export function unwrap(props: Props): Props {
  const out: Props = {};
  for (const [k, v] of Object.entries(props)) {
    out[k] = typeof v === 'object' && v !== null && 'signature' in v && 'value' in v ? (v as { value: unknown }).value : v;
  }
  return out;
}

export function usecToMs(v: unknown): number {
  if (typeof v === 'bigint') return Number(v / 1000n);
  if (typeof v === 'number') return Math.floor(v / 1000);
  return 0;
}

const num = (v: unknown): number => (typeof v === 'bigint' ? Number(v) : typeof v === 'number' ? v : 0);
const str = (v: unknown): string => (typeof v === 'string' ? v : '');

const MACHINE_FIELDS: Record<string, (v: unknown) => Partial<MachineInfo>> = {
  Name: (v) => ({ name: str(v) }),
  Uuid: (v) => ({ uuid: str(v) }),
  DomainName: (v) => ({ domainName: str(v) }),
  State: (v) => ({ state: str(v) }),
  Power: (v) => ({ power: str(v) }),
  CreatedAt: (v) => ({ createdAt: usecToMs(v) }),
  DeletionTimestamp: (v) => ({ deletionTimestamp: usecToMs(v) }),
  ShutdownRequestedAt: (v) => ({ shutdownRequestedAt: usecToMs(v) }),
  ForceStopAt: (v) => ({ forceStopAt: usecToMs(v) }),
  GracePeriodSec: (v) => ({ gracePeriodSec: num(v) }),
  Annotations: (v) => ({ annotations: typeof v === 'object' && v !== null ? { ...(v as Record<string, string>) } : {} }),
  Spec: (v) => ({ spec: str(v) }),
  ResourceVersion: (v) => ({ resourceVersion: num(v) }),
};

/** Only the properties present (a PropertiesChanged body carries just what changed). */
export function partialMachine(props: Props): Partial<MachineInfo> {
  const values = unwrap(props);
  let out: Partial<MachineInfo> = {};
  for (const [k, v] of Object.entries(values)) {
    const field = MACHINE_FIELDS[k];
    if (field) out = { ...out, ...field(v) };
  }
  return out;
}

export function machineFromProperties(path: string, props: Props): MachineInfo {
  return {
    name: '',
    uuid: '',
    domainName: '',
    state: '',
    power: '',
    createdAt: 0,
    deletionTimestamp: 0,
    shutdownRequestedAt: 0,
    forceStopAt: 0,
    gracePeriodSec: 0,
    annotations: {},
    spec: '',
    resourceVersion: 0,
    ...partialMachine(props),
    path,
  };
}

export function managerFromProperties(props: Props): ManagerInfo {
  const v = unwrap(props);
  return {
    version: str(v.Version),
    state: str(v.State),
    libvirtUri: str(v.LibvirtUri),
    libvirtConnected: v.LibvirtConnected === true,
    defaultGracePeriodSec: num(v.DefaultGracePeriodSec),
    sweepIntervalSec: num(v.SweepIntervalSec),
    shutdownRetryIntervalSec: num(v.ShutdownRetryIntervalSec),
    hostShutdownTimeoutSec: num(v.HostShutdownTimeoutSec),
    drainState: str(v.DrainState),
  };
}

/** One (ssstt) row of ListShutdownRecords. */
export function shutdownRecordFromTuple(t: readonly unknown[]): ShutdownRecordSummary {
  return { id: str(t[0]), kind: str(t[1]), result: str(t[2]), startedAt: usecToMs(t[3]), finishedAt: usecToMs(t[4]) };
}

/** One (tssss) tuple of ListEvents or a MachineEvent body. */
export function eventFromTuple(t: readonly unknown[]): AgentEvent {
  return { timestamp: usecToMs(t[0]), machine: str(t[1]), type: str(t[2]), reason: str(t[3]), message: str(t[4]) };
}

/** One (ttssssss) tuple of ListEventsSince or an EventRecorded body. */
export function sequencedEventFromTuple(t: readonly unknown[]): AgentEvent {
  return { ...eventFromTuple(t.slice(1)), sequence: Number(t[0]), uid: str(t[6]), call: str(t[7]) };
}
