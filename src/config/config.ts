import type { SpecLimits } from '../machine/spec.js';
import { DEFAULT_SPEC_LIMITS } from '../machine/spec.js';
import type { CONFIG_FIELDS, FieldValues } from './schema.js';

// The agent's one typed configuration, its type from the schema (schema.ts). Defaults live here;
// config/config.yaml mirrors them and a test keeps the two equal. The reference is docs/configuration.md.

type FileValues = FieldValues<typeof CONFIG_FIELDS>;
export type LogLevel = FileValues['log']['level'];
/** The file's "auto" is resolved at load: the agent always runs with one of these. */
export type LogFormat = Exclude<FileValues['log']['format'], 'auto'>;
export type DomainType = FileValues['defaultDomainType'];

export type Config = Omit<FileValues, 'log'> & { log: { level: LogLevel; format: LogFormat; journalTransport: FileValues['log']['journalTransport'] } };

export const DEFAULT_STATE_DIR = '/var/lib/vmkeeper';
export const DEFAULT_CONFIG_PATH = '/etc/vmkeeper/config.yaml';

/** Built-in defaults. log.format here is the fallback when not run by systemd (see load-config). */
export function defaultConfig(): Config {
  return {
    bus: 'system',
    libvirt: { uri: 'qemu:///system', callTimeoutSec: 30, domainEvents: 'auto' },
    stateDir: DEFAULT_STATE_DIR,
    imageDirectories: ['/var/lib/vmkeeper/images'],
    defaultDomainType: 'kvm',
    authorization: 'auto',
    machines: {
      defaultGracePeriodSec: 60,
      sweepIntervalSec: 10,
      shutdownRetryIntervalSec: 5,
      resyncIntervalSec: 30,
      pollIntervalMs: 1000,
    },
    hostShutdown: { action: 'shutdown', timeoutSec: 120, parallelism: 8, onServiceStop: 'leave', groups: [] },
    restore: { parallelism: 4, delaySec: 0 },
    events: { maxCount: 10_000, maxAgeSec: 604_800 },
    log: { level: 'info', format: 'text', journalTransport: 'auto' },
  };
}

/** Spec validation limits that follow from the config; the hard maxima stay built in. */
export function specLimitsFrom(config: Config): SpecLimits {
  return {
    ...DEFAULT_SPEC_LIMITS,
    imageDirectories: [...config.imageDirectories],
    defaultDomainType: config.defaultDomainType,
  };
}
