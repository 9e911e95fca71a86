import path from 'node:path';
import { InvalidValue } from './errors.js';

// The shape of the config file: sections hold fields, each field a parser that throws InvalidValue.
// One table drives file validation, flag parsing and the docs test, so they cannot disagree.

export type Parse = (value: unknown) => unknown;
export interface Section {
  [key: string]: Section | Parse;
}

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

export function integer(min: number, max: number): Parse {
  const kind = min >= 1 ? 'a positive integer' : 'a non-negative integer';
  return (v) => {
    if (typeof v !== 'number' || !Number.isInteger(v)) throw new InvalidValue(`must be ${kind} (got ${shown(v)})`);
    if (v < min || v > max) throw new InvalidValue(`must be between ${min} and ${max} (got ${v})`);
    return v;
  };
}

export function oneOf<T extends string>(...values: T[]): Parse {
  return (v) => {
    if (typeof v !== 'string' || !(values as string[]).includes(v)) {
      throw new InvalidValue(`must be one of ${values.map((x) => `"${x}"`).join(', ')} (got ${shown(v)})`);
    }
    return v;
  };
}

export const absolutePath: Parse = (v) => {
  if (typeof v !== 'string' || v === '') throw new InvalidValue(`must be an absolute path (got ${shown(v)})`);
  if (!path.isAbsolute(v)) throw new InvalidValue(`must be an absolute path (got ${shown(v)})`);
  if (/[\u0000-\u001f]/.test(v)) throw new InvalidValue('must not contain control characters');
  // Normalised so image-directory prefix checks in spec.ts compare like with like.
  const normal = path.normalize(v);
  return normal.length > 1 && normal.endsWith('/') ? normal.slice(0, -1) : normal;
};

export const pathList: Parse = (v) => {
  if (!Array.isArray(v) || v.length === 0) throw new InvalidValue(`must be a non-empty list of absolute paths (got ${shown(v)})`);
  return v.map((item, i) => {
    try {
      return absolutePath(item);
    } catch (err) {
      throw new InvalidValue(`[${i}] ${(err as Error).message}`);
    }
  });
};

export const busAddress: Parse = (v) => {
  if (v === 'system' || v === 'session') return v;
  // A D-Bus address is transport:key=value[,key=value]; anything else is surely a typo.
  if (typeof v === 'string' && /^[a-z]+:([^=,;]+=[^,;]*)(,[^=,;]+=[^,;]*)*(;.*)?$/.test(v)) return v;
  throw new InvalidValue(`must be "system", "session" or a D-Bus address like "unix:path=/run/bus" (got ${shown(v)})`);
};

export const libvirtUri: Parse = (v) => {
  if (typeof v !== 'string' || !/^[a-z][a-z0-9+.-]*:\/\/\S*$/.test(v)) {
    throw new InvalidValue(`must be a libvirt URI like "qemu:///system" (got ${shown(v)})`);
  }
  return v;
};

export const CONFIG_SCHEMA: Section = {
  bus: busAddress,
  libvirt: { uri: libvirtUri, callTimeoutSec: integer(1, 3600) },
  stateDir: absolutePath,
  imageDirectories: pathList,
  defaultDomainType: oneOf('kvm', 'qemu'),
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
  },
  log: { level: oneOf('error', 'warn', 'info', 'debug'), format: oneOf('auto', 'journal', 'text', 'json') },
};

export type KeyPath = (string | number)[];

/** A validation failure at a key path (the loader turns it into a ConfigError with a line). */
export class FieldError extends Error {
  constructor(
    readonly keyPath: KeyPath,
    why: string,
  ) {
    super(why);
  }
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/**
 * Validates raw (parsed YAML) against the schema and writes the parsed values into target.
 * Unknown keys are rejected so a typo never silently becomes a default. Returns the set of
 * key paths (dotted) that were given.
 */
export function applySection(raw: unknown, schema: Section, target: Record<string, unknown>, at: KeyPath = []): Set<string> {
  const given = new Set<string>();
  // An empty section ("machines:" with every child commented out) parses as null: keep defaults.
  if (raw === null || raw === undefined) return given;
  if (!isPlainObject(raw)) throw new FieldError(at, `must be a mapping (got ${shown(raw)})`);
  for (const [key, value] of Object.entries(raw)) {
    const here = [...at, key];
    const field = Object.hasOwn(schema, key) ? schema[key] : undefined;
    if (field === undefined) {
      throw new FieldError(here, `unknown key (expected one of: ${Object.keys(schema).join(', ')})`);
    }
    if (typeof field === 'function') {
      try {
        target[key] = field(value);
      } catch (err) {
        if (!(err instanceof InvalidValue)) throw err;
        // pathList reports "[i] why": point the key path at the item.
        const item = /^\[(\d+)\] (.*)$/s.exec(err.message);
        if (item) throw new FieldError([...here, Number(item[1])], item[2]!);
        throw new FieldError(here, err.message);
      }
      given.add(here.join('.'));
    } else {
      const sub = applySection(value, field, target[key] as Record<string, unknown>, here);
      for (const g of sub) given.add(g);
    }
  }
  return given;
}

/** "machines.sweepIntervalSec", "imageDirectories[1]" */
export function formatKeyPath(keyPath: KeyPath): string {
  return keyPath.map((k, i) => (typeof k === 'number' ? `[${k}]` : i === 0 ? k : `.${k}`)).join('');
}
