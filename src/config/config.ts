import type { SpecLimits } from '../machine/spec.js';
import { DEFAULT_SPEC_LIMITS } from '../machine/spec.js';

// The agent's one typed configuration. Defaults live here; config/config.yaml mirrors them and a
// test keeps the two equal. The reference is docs/configuration.md.

export type LogLevel = 'error' | 'warn' | 'info' | 'debug';
export type LogFormat = 'journal' | 'text' | 'json';
export type DomainType = 'kvm' | 'qemu';

export interface Config {
  /** 'system', 'session' or a D-Bus address such as unix:path=/run/x. */
  bus: string;
  libvirt: { uri: string; callTimeoutSec: number };
  stateDir: string;
  imageDirectories: string[];
  defaultDomainType: DomainType;
  machines: {
    defaultGracePeriodSec: number;
    sweepIntervalSec: number;
    shutdownRetryIntervalSec: number;
    resyncIntervalSec: number;
    pollIntervalMs: number;
  };
  hostShutdown: {
    action: 'shutdown' | 'leave';
    timeoutSec: number;
    parallelism: number;
    onServiceStop: 'leave' | 'shutdown';
  };
  log: { level: LogLevel; format: LogFormat };
}

export const DEFAULT_STATE_DIR = '/var/lib/vmkeeper';
export const DEFAULT_CONFIG_PATH = '/etc/vmkeeper/config.yaml';

/** Built-in defaults. log.format here is the fallback when not run by systemd (see load-config). */
export function defaultConfig(): Config {
  return {
    bus: 'system',
    libvirt: { uri: 'qemu:///system', callTimeoutSec: 30 },
    stateDir: DEFAULT_STATE_DIR,
    imageDirectories: ['/var/lib/vmkeeper/images'],
    defaultDomainType: 'kvm',
    machines: {
      defaultGracePeriodSec: 60,
      sweepIntervalSec: 10,
      shutdownRetryIntervalSec: 5,
      resyncIntervalSec: 30,
      pollIntervalMs: 1000,
    },
    hostShutdown: { action: 'shutdown', timeoutSec: 120, parallelism: 8, onServiceStop: 'leave' },
    log: { level: 'info', format: 'text' },
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
