import { conflict, machineExists } from '../machine/errors.js';
import type { MachineRecord } from '../machine/record.js';

// What a change requires of the record it changes: the version the caller read, or for a create
// that repeats itself, the very same spec.

/** Throws Conflict unless expected is 0/absent or the record's current ResourceVersion. */
export function requireVersion(record: MachineRecord, expected: number | undefined): void {
  if (expected && record.resourceVersion !== expected) throw conflict(record.name, record.resourceVersion, expected);
}

/** JSON with object keys sorted, so two equal specs compare equal whatever their key order. */
function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (value && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>).filter(([, v]) => v !== undefined).sort(([a], [b]) => (a < b ? -1 : 1));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonical(v)}`).join(',')}}`;
  }
  return JSON.stringify(value);
}

/** A retried create gets the machine it made; another spec under the same name stays MachineExists. */
export function existingIfSame(existing: MachineRecord, spec: MachineRecord['spec'], annotations: MachineRecord['annotations']): MachineRecord {
  const same = existing.deletionTimestamp === 0 && canonical(existing.spec) === canonical(spec) && canonical(existing.annotations) === canonical(annotations);
  if (!same) throw machineExists(existing.name);
  return existing;
}
