import * as v from 'valibot';
import { invalidSpec } from './errors.js';
import { dottedPath, isPlainObject, mapEntryPath, validate } from './schema-issues.js';
import { textProblem } from './text-rules.js';

// Annotation grammar (docs/dbus-api.md), modelled on Kubernetes annotations: a key is an optional
// DNS-subdomain prefix and "/" and a name; a value is free text of printable characters.

export type Annotations = Record<string, string>;

export const MAX_ANNOTATIONS = 64;
export const MAX_ANNOTATION_NAME = 63;
export const MAX_ANNOTATION_PREFIX = 253;
/** Keys and values together, in UTF-8 bytes. */
export const MAX_ANNOTATIONS_BYTES = 64 * 1024;

const NAME = /^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/;
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
// Keys that would shadow or replace a plain object's own machinery wherever a copy is made with `{}`.
const PROTOTYPE_NAMES = new Set(Object.getOwnPropertyNames(Object.prototype));

/** An empty annotation map with no prototype, so no key can reach Object.prototype's members. */
export function emptyAnnotations(): Annotations {
  return Object.create(null) as Annotations;
}

/** A prototype-free copy of a map already validated (a stored record, a parsed spec). */
export function copyAnnotations(from: Readonly<Annotations>): Annotations {
  return Object.assign(emptyAnnotations(), from);
}

/** Why `key` is not a valid annotation key, or undefined. */
export function annotationKeyProblem(key: string): string | undefined {
  if (PROTOTYPE_NAMES.has(key)) return 'is a reserved name';
  const slash = key.indexOf('/');
  const prefix = slash >= 0 ? key.slice(0, slash) : undefined;
  const name = slash >= 0 ? key.slice(slash + 1) : key;
  if (prefix !== undefined && (prefix.length === 0 || prefix.length > MAX_ANNOTATION_PREFIX || !DNS_SUBDOMAIN.test(prefix))) {
    return `prefix must be a DNS subdomain of at most ${MAX_ANNOTATION_PREFIX} characters (lower-case labels joined by ".")`;
  }
  if (name.length === 0 || name.length > MAX_ANNOTATION_NAME || !NAME.test(name)) {
    return `name must be 1-${MAX_ANNOTATION_NAME} characters of A-Z, a-z, 0-9, "-", "_", ".", starting and ending with a letter or digit`;
  }
  return undefined;
}

/** Why an entry breaks the grammar: at its key, or at its value; undefined when it is fine. */
function entryProblem(key: string, value: unknown): { at: 'key' | 'value'; why: string } | undefined {
  const keyProblem = annotationKeyProblem(key) ?? textProblem(key);
  if (keyProblem) return { at: 'key', why: `key ${keyProblem}` };
  if (typeof value !== 'string') return { at: 'value', why: 'must be a string' };
  const valueProblem = textProblem(value, true);
  return valueProblem ? { at: 'value', why: valueProblem } : undefined;
}

/** An annotation map from a caller: the grammar, the count and the size, output without a prototype. */
export const annotationsSchema = v.pipe(
  v.custom<Record<string, unknown>>(isPlainObject, 'must be an object of strings'),
  v.check((map) => Object.keys(map).length <= MAX_ANNOTATIONS, `must have at most ${MAX_ANNOTATIONS} entries`),
  v.rawCheck<Record<string, unknown>>(({ dataset, addIssue }) => {
    if (!dataset.typed) return;
    let bytes = 0;
    for (const [key, value] of Object.entries(dataset.value)) {
      const problem = entryProblem(key, value);
      if (problem) return addIssue({ message: problem.why, path: mapEntryPath(dataset.value, key, problem.at) });
      bytes += Buffer.byteLength(key, 'utf8') + Buffer.byteLength(value as string, 'utf8');
      if (bytes > MAX_ANNOTATIONS_BYTES) return addIssue({ message: `keys and values must total at most ${MAX_ANNOTATIONS_BYTES} bytes` });
    }
  }),
  v.transform((map) => Object.assign(emptyAnnotations(), map as Annotations)),
);

/** Validates an annotation map from a caller; throws InvalidSpec naming the key at fault. */
export function parseAnnotations(value: unknown, field = 'annotations'): Annotations {
  const result = validate(annotationsSchema, value);
  if (result.ok) return result.value;
  const { keyPath, atMapKey, why } = result.problem;
  throw invalidSpec(dottedPath({ keyPath: [field, ...keyPath], atMapKey }), why);
}

/**
 * For records written before the grammar was tightened: keeps the entries that meet it (within
 * the count and size bounds) and counts the rest, so an upgrade drops a stale annotation instead
 * of quarantining the whole machine. `map` must already be a plain object.
 */
export function keepValidAnnotations(map: object): { kept: Annotations; dropped: number } {
  const kept = emptyAnnotations();
  let dropped = 0;
  let count = 0;
  let bytes = 0;
  for (const [key, value] of Object.entries(map)) {
    const size = typeof value === 'string' ? Buffer.byteLength(key, 'utf8') + Buffer.byteLength(value, 'utf8') : 0;
    if (entryProblem(key, value) !== undefined || count === MAX_ANNOTATIONS || bytes + size > MAX_ANNOTATIONS_BYTES) {
      dropped++;
      continue;
    }
    kept[key] = value as string;
    count++;
    bytes += size;
  }
  return { kept, dropped };
}
