import path from 'node:path';
import * as v from 'valibot';
import { dottedPath, isPlainObject, type KeyPath } from '../machine/schema-issues.js';

export type { KeyPath } from '../machine/schema-issues.js';

// The shape of the config file: sections hold fields, each field a valibot schema whose message
// says what is wrong and shows the value. One table drives file validation, flag parsing, the
// Config type (config.ts) and the docs test, so they cannot disagree.

/** A short, quoted rendering of a bad value for messages. */
export function shown(value: unknown): string {
  let text: string;
  try {
    text = JSON.stringify(value) ?? String(value);
  } catch {
    text = String(value);
  }
  return text.length > 60 ? `${text.slice(0, 57)}...` : text;
}

const got = (why: string) => (issue: v.BaseIssue<unknown>) => `${why} (got ${shown(issue.input)})`;

export function integer(min: number, max: number) {
  const kind = min >= 1 ? 'a positive integer' : 'a non-negative integer';
  return v.pipe(
    v.custom<number>((x) => typeof x === 'number' && Number.isInteger(x), got(`must be ${kind}`)),
    v.check((x) => x >= min && x <= max, got(`must be between ${min} and ${max}`)),
  );
}

export function oneOf<const T extends readonly [string, ...string[]]>(...values: T) {
  return v.picklist(values, got(`must be one of ${values.map((x) => `"${x}"`).join(', ')}`));
}

export const absolutePath = v.pipe(
  v.custom<string>((x) => typeof x === 'string' && path.isAbsolute(x), got('must be an absolute path')),
  v.check((x) => !/[\u0000-\u001f]/.test(x), 'must not contain control characters'),
  // Normalised so image-directory prefix checks in spec.ts compare like with like.
  v.transform((x) => {
    const normal = path.normalize(x);
    return normal.length > 1 && normal.endsWith('/') ? normal.slice(0, -1) : normal;
  }),
);

export const pathList = v.pipe(
  v.custom<unknown[]>((x) => Array.isArray(x) && x.length > 0, got('must be a non-empty list of absolute paths')),
  v.array(absolutePath),
);

export const busAddress = v.custom<string>(
  // A D-Bus address is transport:key=value[,key=value]; anything else is surely a typo.
  (x) => x === 'system' || x === 'session' || (typeof x === 'string' && /^[a-z]+:([^=,;]+=[^,;]*)(,[^=,;]+=[^,;]*)*(;.*)?$/.test(x)),
  got('must be "system", "session" or a D-Bus address like "unix:path=/run/bus"'),
);

export const libvirtUri = v.custom<string>(
  (x) => typeof x === 'string' && /^[a-z][a-z0-9+.-]*:\/\/\S*$/.test(x),
  got('must be a libvirt URI like "qemu:///system"'),
);

/** One host-shutdown priority group: machines with shutdownPriority >= minPriority (up to the next group's). */
const priorityGroup = v.pipe(
  v.custom<Record<string, unknown>>(isPlainObject, got('must be a mapping with minPriority and budgetSec')),
  v.strictObject(
    { minPriority: integer(0, 1000), budgetSec: integer(1, 86400) },
    (issue) => (issue.expected === 'never' ? 'unknown key (expected minPriority, budgetSec)' : 'needs minPriority and budgetSec'),
  ),
);

export const priorityGroups = v.pipe(
  v.custom<unknown[]>((x) => Array.isArray(x), got('must be a list of {minPriority, budgetSec} mappings')),
  v.array(priorityGroup),
  v.check((groups) => new Set(groups.map((g) => g.minPriority)).size === groups.length, 'names a minPriority twice'),
);

export const CONFIG_FIELDS = {
  bus: busAddress,
  libvirt: { uri: libvirtUri, callTimeoutSec: integer(1, 3600), domainEvents: oneOf('auto', 'off') },
  stateDir: absolutePath,
  imageDirectories: pathList,
  defaultDomainType: oneOf('kvm', 'qemu'),
  authorization: oneOf('auto', 'polkit', 'bus-policy'),
  machines: {
    defaultGracePeriodSec: integer(0, 86400),
    sweepIntervalSec: integer(1, 3600),
    shutdownRetryIntervalSec: integer(1, 3600),
    resyncIntervalSec: integer(1, 86400),
    pollIntervalMs: integer(10, 60000),
  },
  hostShutdown: {
    action: oneOf('shutdown', 'leave'),
    timeoutSec: integer(1, 86400),
    parallelism: integer(1, 1024),
    onServiceStop: oneOf('leave', 'shutdown'),
    groups: priorityGroups,
  },
  restore: { parallelism: integer(1, 1024), delaySec: integer(0, 3600) },
  // Every kept event is in memory and read at start-up: a million is about 200 MiB and a few
  // seconds (docs/performance.md, "What retention costs").
  events: { maxCount: integer(100, 1_000_000), maxAgeSec: integer(60, 31_536_000) },
  log: {
    level: oneOf('error', 'warn', 'info', 'debug'),
    format: oneOf('auto', 'journal', 'text', 'json'),
    journalTransport: oneOf('auto', 'native', 'stream'),
  },
};

interface Section {
  [key: string]: Section | v.GenericSchema;
}
const isField = (entry: Section | v.GenericSchema): entry is v.GenericSchema => 'kind' in entry && entry.kind === 'schema';

/** What each field yields, by section: the shape of Config before "auto" is resolved. */
export type FieldValues<S> = { -readonly [K in keyof S]: S[K] extends v.GenericSchema ? v.InferOutput<S[K]> : FieldValues<S[K]> };
type Given<S> = { [K in keyof S]?: S[K] extends v.GenericSchema ? v.InferOutput<S[K]> : Given<S[K]> | null };

/** Every field's dotted key path: "machines.sweepIntervalSec". */
export function fieldKeyPaths(section: Section = CONFIG_FIELDS, prefix = ''): string[] {
  return Object.entries(section).flatMap(([k, entry]) => (isField(entry) ? [prefix + k] : fieldKeyPaths(entry, `${prefix}${k}.`)));
}

/**
 * A section of the file: every field optional, unknown keys refused so a typo never silently
 * becomes a default. An empty section ("machines:" with every child commented out) parses as null.
 */
function sectionSchema(section: Section): v.GenericSchema {
  const entries = Object.fromEntries(Object.entries(section).map(([k, entry]) => [k, v.optional(isField(entry) ? entry : sectionSchema(entry))]));
  const known = Object.keys(section).join(', ');
  return v.nullish(
    v.pipe(
      v.custom<Record<string, unknown>>(isPlainObject, got('must be a mapping')),
      v.strictObject(entries, `unknown key (expected one of: ${known})`),
    ),
  );
}

/** The config file as parsed YAML: only the keys it gives. */
export const CONFIG_FILE_SCHEMA = sectionSchema(CONFIG_FIELDS) as v.GenericSchema<unknown, Given<typeof CONFIG_FIELDS> | null | undefined>;

/**
 * Copies what a parsed file gave over target, section by section; returns the dotted key paths
 * given (an empty section gives none).
 */
export function applyGiven(values: object | null | undefined, target: Record<string, unknown>, prefix = ''): Set<string> {
  const given = new Set<string>();
  for (const [k, value] of Object.entries(values ?? {})) {
    if (value === null || value === undefined) continue;
    if (isPlainObject(value)) {
      for (const g of applyGiven(value, target[k] as Record<string, unknown>, `${prefix}${k}.`)) given.add(g);
    } else {
      target[k] = value;
      given.add(prefix + k);
    }
  }
  return given;
}

/** "machines.sweepIntervalSec", "imageDirectories[1]" */
export function formatKeyPath(keyPath: KeyPath): string {
  return dottedPath({ keyPath, atMapKey: false });
}
