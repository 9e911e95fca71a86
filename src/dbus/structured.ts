import { Variant } from 'dbus-next';
import { specView, type MachineRecord } from '../machine/record.js';
import { uint32, usec } from './interface-support.js';

// DescribeMachine as D-Bus types instead of JSON text (docs/dbus-api.md, Structured types): the
// same record, with timestamps as t microseconds like the properties, and absent values left out
// rather than sent as null or 0, so a client tests for a key instead of a sentinel.

export type VariantDict = Record<string, Variant>;

export const STRUCTURED_SIGNATURE = 'a{sv}';

/** Keeps only the entries that have a value: undefined marks an absent one. */
function dict(entries: Record<string, Variant | undefined>): VariantDict {
  return Object.fromEntries(Object.entries(entries).filter((e): e is [string, Variant] => e[1] !== undefined));
}

const timestamp = (ms: number): Variant | undefined => (ms > 0 ? new Variant('t', usec(ms)) : undefined);
const text = (s: string | undefined): Variant | undefined => (s ? new Variant('s', s) : undefined);

/** Any spec value as a variant: the spec's numbers are small non-negative integers (u), its maps a{sv}. */
export function specValue(key: string, value: unknown): Variant | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value === 'string') return new Variant('s', value);
  if (typeof value === 'boolean') return new Variant('b', value);
  if (typeof value === 'number') {
    if (!Number.isInteger(value) || value < 0 || value > 0xffffffff) throw new Error(`spec field ${key} is not a uint32: ${value}`);
    return new Variant('u', value);
  }
  if (Array.isArray(value)) {
    if (value.every((item) => typeof item === 'string')) return value.length > 0 ? new Variant('as', value) : new Variant('aa{sv}', []);
    return new Variant('aa{sv}', value.map((item, i) => specDict(`${key}[${i}]`, item)));
  }
  // Annotations are the one string map; a{ss} as in the Annotations property.
  if (key === 'annotations') return new Variant('a{ss}', { ...(value as Record<string, string>) });
  return new Variant('a{sv}', specDict(key, value));
}

function specDict(key: string, value: unknown): VariantDict {
  if (typeof value !== 'object' || value === null) throw new Error(`spec field ${key} is not an object`);
  return dict(Object.fromEntries(Object.entries(value).map(([k, v]) => [k, specValue(key ? `${key}.${k}` : k, v)])));
}

/** The validated spec as a{sv}. */
export function structuredSpec(r: MachineRecord): VariantDict {
  return specDict('', specView(r));
}

/** The whole record (metadata, spec, status) as a{sv}: DescribeMachine's JSON with D-Bus types. */
export function describeStructured(r: MachineRecord): VariantDict {
  const deleting = r.deletionTimestamp > 0;
  return {
    apiVersion: new Variant('s', r.apiVersion),
    metadata: new Variant(
      'a{sv}',
      dict({
        name: new Variant('s', r.name),
        uuid: new Variant('s', r.uuid),
        domainName: new Variant('s', r.domainName),
        createdAt: timestamp(r.createdAt),
        deletionTimestamp: timestamp(r.deletionTimestamp),
        deletionGracePeriodSec: deleting ? new Variant('u', uint32(r.deletionGracePeriodSec)) : undefined,
        resourceVersion: new Variant('t', BigInt(Math.max(0, Math.trunc(r.resourceVersion)))),
        annotations: new Variant('a{ss}', { ...r.annotations }),
      }),
    ),
    spec: new Variant('a{sv}', structuredSpec(r)),
    status: new Variant(
      'a{sv}',
      dict({
        state: new Variant('s', r.status.state),
        power: new Variant('s', r.spec.power),
        shutdownRequestedAt: timestamp(r.status.shutdownRequestedAt),
        forceStopAt: timestamp(r.status.forceStopAt),
        gracePeriodSec: new Variant('u', uint32(r.status.gracePeriodSec)),
        message: text(r.status.message),
      }),
    ),
  };
}
