import type * as v from 'valibot';
import { invalidSpec } from './errors.js';
import { dottedPath, validate } from './schema-issues.js';
import { machineSpecSchema, powerSchema, type SpecLimits } from './spec-schema.js';

export { parseAnnotations } from './annotations.js';
export type { SpecLimits } from './spec-schema.js';
export { HOST_SHUTDOWN_ACTIONS, MAX_PRIORITY } from './spec-schema.js';

// Machine spec, version 1 (docs/dbus-api.md): its types, from the schema in spec-schema.ts, and the
// two ways in (JSON text from a caller, a parsed object from a stored record).

export type MachineSpec = v.InferOutput<ReturnType<typeof machineSpecSchema>>;
export type PowerState = MachineSpec['power'];
/** What the agent does when a machine whose power is "on" stops without being asked to. */
export type RestartPolicy = NonNullable<MachineSpec['restartPolicy']>;
/** What host shutdown and drain do with a running guest: ACPI shutdown, save its memory, or destroy. */
export type HostShutdownAction = NonNullable<MachineSpec['hostShutdownAction']>;
export type BootSpec = NonNullable<MachineSpec['boot']>;
export type DiskSpec = MachineSpec['disks'][number];
export type NicSpec = MachineSpec['nics'][number];

export const DEFAULT_SPEC_LIMITS: SpecLimits = {
  imageDirectories: ['/var/lib/vmkeeper/images'],
  maxCpus: 256,
  maxMemoryMiB: 4 * 1024 * 1024,
  maxDiskGiB: 64 * 1024,
  defaultDomainType: 'kvm',
};

export const MAX_SPEC_BYTES = 64 * 1024;

// The agent has one limits object for its lifetime: build its schema once, not per request.
const schemas = new WeakMap<SpecLimits, ReturnType<typeof machineSpecSchema>>();
function schemaFor(limits: SpecLimits): ReturnType<typeof machineSpecSchema> {
  let schema = schemas.get(limits);
  if (!schema) schemas.set(limits, (schema = machineSpecSchema(limits)));
  return schema;
}

export function parsePower(value: unknown, field = 'power'): PowerState {
  const result = validate(powerSchema, value);
  if (!result.ok) throw invalidSpec(field, result.problem.why);
  return result.value;
}

/** Spec JSON text as a value, bounded in size; throws InvalidSpec for text that is too big or not JSON. */
export function parseSpecJson(jsonText: string): unknown {
  if (Buffer.byteLength(jsonText, 'utf8') > MAX_SPEC_BYTES) throw invalidSpec('(spec)', `must be at most ${MAX_SPEC_BYTES} bytes`);
  try {
    return JSON.parse(jsonText);
  } catch (err) {
    throw invalidSpec('(spec)', `is not valid JSON: ${(err as Error).message}`);
  }
}

/** Parses and validates spec JSON text; throws InvalidSpec naming the field. */
export function parseMachineSpec(jsonText: string, limits: SpecLimits): MachineSpec {
  return validateMachineSpec(parseSpecJson(jsonText), limits);
}

export function validateMachineSpec(raw: unknown, limits: SpecLimits): MachineSpec {
  const result = validate(schemaFor(limits), raw);
  if (result.ok) return result.value;
  throw invalidSpec(result.problem.keyPath.length > 0 ? dottedPath(result.problem) : '(spec)', result.problem.why);
}

/** The lifecycle settings of a spec with their defaults filled in. */
export function lifecycleOf(spec: Pick<MachineSpec, 'hostShutdownAction' | 'shutdownPriority' | 'startPriority'>): {
  hostShutdownAction: HostShutdownAction;
  shutdownPriority: number;
  startPriority: number;
} {
  return {
    hostShutdownAction: spec.hostShutdownAction ?? 'shutdown',
    shutdownPriority: spec.shutdownPriority ?? 0,
    startPriority: spec.startPriority ?? 0,
  };
}
