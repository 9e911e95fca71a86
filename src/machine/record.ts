import type * as v from 'valibot';
import { copyAnnotations, type Annotations } from './annotations.js';
import { copyJson } from './copy-json.js';
import type { machineStatusSchema, recordFieldsSchema } from './record-schema.js';
import type { MachineSpec, PowerState } from './spec.js';

// The persisted machine record, its types from record-schema.ts. Times are milliseconds since the
// epoch (0 = unset); the D-Bus edge converts them to the microseconds the contract speaks.

/** The on-disk format this agent writes; older ones are migrated at load (store/record-migration.ts). */
export const RECORD_API_VERSION = 'vmkeeper/v2';

export type MachineStatus = v.InferOutput<typeof machineStatusSchema>;
export type MachineState = MachineStatus['state'];

/** The spec as stored: annotations live once, in MachineRecord.annotations, and change apart from it. */
export type StoredSpec = Omit<MachineSpec, 'annotations'>;

type CheckedFields = v.InferOutput<ReturnType<typeof recordFieldsSchema>>;

export interface MachineRecord extends Omit<CheckedFields, 'annotations' | 'spec'> {
  apiVersion: typeof RECORD_API_VERSION;
  name: string;
  domainName: string;
  annotations: Annotations;
  spec: StoredSpec;
}

export function newStatus(): MachineStatus {
  return {
    state: 'pending',
    shutdownRequestedAt: 0,
    forceStopAt: 0,
    lastShutdownSentAt: 0,
    forceStoppedAt: 0,
    gracePeriodSec: 0,
    domainDefined: false,
    message: '',
  };
}

export const isDeleting = (r: MachineRecord): boolean => r.deletionTimestamp > 0;
/** A deletion or a power-off that has not finished: the sweeper owns such a machine. */
export const isShuttingDown = (r: MachineRecord): boolean => r.deletionTimestamp > 0 || r.status.forceStopAt > 0;
export const desiredPower = (r: MachineRecord): PowerState => r.spec.power;

/** Splits a caller's spec into what the record stores as spec and its annotations. */
export function splitSpec(spec: MachineSpec): { spec: StoredSpec; annotations: Annotations } {
  const { annotations, ...stored } = spec;
  return { spec: stored, annotations: copyAnnotations(annotations) };
}

/**
 * The spec as callers see it (the Spec property, Describe): the stored spec with the record's
 * annotations. The one place both are joined, so no stale copy can be shown.
 */
export function specView(r: MachineRecord): MachineSpec {
  return { ...r.spec, annotations: copyAnnotations(r.annotations) };
}

/** A deep copy, so a record handed out can never be mutated behind the store's back. */
export function cloneRecord(r: MachineRecord): MachineRecord {
  return copyJson(r);
}

/** Deep-freezes a record: the store hands out shared frozen records instead of copying 10,000 per list. */
export function freezeRecord(r: MachineRecord): MachineRecord {
  const freeze = (v: unknown): void => {
    if (typeof v !== 'object' || v === null || Object.isFrozen(v)) return;
    Object.freeze(v);
    for (const child of Object.values(v)) freeze(child);
  };
  freeze(r);
  return r;
}
