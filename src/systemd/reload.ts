import type { Config, LogLevel } from '../config/config.js';
import type { Logger, LogFields } from '../logging/logger.js';

// SIGHUP: re-read the config. Only keys that are read at the moment of use change at runtime;
// everything else is fixed into components at start and needs `systemctl restart vmkeeperd`
// (which leaves the guests running). docs/operations.md lists both sets.

/** Dotted keys a reload applies at once. */
export const RUNTIME_KEYS: readonly string[] = [
  'log.level',
  'hostShutdown.action',
  'hostShutdown.timeoutSec',
  'hostShutdown.parallelism',
  'hostShutdown.onServiceStop',
  // Read by the stop procedure at the start of each run.
  'hostShutdown.groups',
];

function flatten(value: unknown, prefix: string, out: Map<string, string>): void {
  if (value !== null && typeof value === 'object' && !Array.isArray(value)) {
    for (const [k, v] of Object.entries(value)) flatten(v, prefix ? `${prefix}.${k}` : k, out);
  } else {
    out.set(prefix, JSON.stringify(value));
  }
}

export interface ConfigDiff {
  /** Changed keys applied now. */
  applied: string[];
  /** Changed keys that take effect only after a restart. */
  needRestart: string[];
}

export function diffConfig(current: Config, next: Config): ConfigDiff {
  const a = new Map<string, string>();
  const b = new Map<string, string>();
  flatten(current, '', a);
  flatten(next, '', b);
  const changed = [...new Set([...a.keys(), ...b.keys()])].filter((k) => a.get(k) !== b.get(k)).sort();
  return {
    applied: changed.filter((k) => RUNTIME_KEYS.includes(k)),
    needRestart: changed.filter((k) => !RUNTIME_KEYS.includes(k)),
  };
}

/** Copies the runtime keys of next into live (in place: components read live at use time). */
export function applyRuntimeKeys(live: Config, next: Config): void {
  live.log.level = next.log.level;
  live.hostShutdown = { ...next.hostShutdown };
}

const ORDER: Record<LogLevel, number> = { error: 0, warn: 1, info: 2, debug: 3 };

/** A logger whose level can change at runtime; the inner one must let everything through. */
export function levelGate(inner: Logger, level: () => LogLevel): Logger {
  const at = (l: LogLevel) => (message: string, fields?: LogFields) => {
    if (ORDER[l] <= ORDER[level()]) inner[l](message, fields);
  };
  return { error: at('error'), warn: at('warn'), info: at('info'), debug: at('debug') };
}
