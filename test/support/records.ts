import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach } from 'vitest';
import { type MachineRecord, RECORD_API_VERSION, newStatus } from '../../src/machine/record.js';
import { FileMachineStore, type FileMachineStoreOptions } from '../../src/store/file-store.js';
import { type StoreFs, nodeStoreFs } from '../../src/store/store-fs.js';
import type { LogFields, Logger } from '../../src/logging/logger.js';

// Shared fixtures for the store tests.

export function makeRecord(name: string, overrides: Partial<MachineRecord> = {}): MachineRecord {
  return {
    apiVersion: RECORD_API_VERSION,
    name,
    uuid: '6f1c1a52-3c1e-4b0e-9a8d-3f1f1b2c0a01',
    domainName: `vmkeeper-${name}`,
    createdAt: 1_700_000_000_000,
    deletionTimestamp: 0,
    deletionGracePeriodSec: 0,
    resourceVersion: 0,
    annotations: { owner: 'test' },
    spec: {
      cpus: 1,
      memoryMiB: 128,
      domainType: 'qemu',
      boot: { kernel: '/var/lib/vmkeeper/images/vmlinuz' },
      disks: [{ name: 'root', sizeGiB: 1 }],
      nics: [],
      power: 'on',
    },
    status: newStatus(),
    ...overrides,
  };
}

/**
 * The same record as the previous release wrote it (vmkeeper/v1): with the fields nobody read.
 * test/fixtures/records/v1/ holds a real file of that release.
 */
export function makeV1Record(name: string): Record<string, unknown> {
  const { apiVersion: _current, ...record } = makeRecord(name);
  return {
    apiVersion: 'vmkeeper/v1',
    ...record,
    finalizers: ['vmkeeper/domain'],
    status: { ...record.status, createdFiles: [] },
  };
}

export interface LogLine {
  level: 'error' | 'warn' | 'info' | 'debug';
  message: string;
  fields?: LogFields;
}

export function captureLogger(): Logger & { lines: LogLine[] } {
  const lines: LogLine[] = [];
  const at = (level: LogLine['level']) => (message: string, fields?: LogFields) => void lines.push({ level, message, fields });
  return { lines, error: at('error'), warn: at('warn'), info: at('info'), debug: at('debug') };
}

export function errnoError(code: string, syscall: string): NodeJS.ErrnoException {
  const text: Record<string, string> = { ENOSPC: 'no space left on device', EIO: 'i/o error', EROFS: 'read-only file system' };
  return Object.assign(new Error(`${code}: ${text[code] ?? 'error'}, ${syscall}`), { code, syscall });
}

/** A fresh temp state dir per test: `paths.root` holds machines/ (`paths.dir`) and quarantine/. */
export function useTempStateDir(): { root: string; dir: string } {
  const paths = { root: '', dir: '' };
  beforeEach(async () => {
    paths.root = await mkdtemp(path.join(tmpdir(), 'vmkeeper-store-'));
    paths.dir = path.join(paths.root, 'machines');
  });
  afterEach(async () => {
    await rm(paths.root, { recursive: true, force: true });
  });
  return paths;
}

/** A store on dir with a capturing logger and a fixed clock (quarantine names are predictable). */
export function newTestStore(dir: string, options: Partial<FileMachineStoreOptions> = {}) {
  const logger = captureLogger();
  const store = new FileMachineStore({ dir, logger, now: () => Date.UTC(2025, 0, 2, 3, 4, 5), ...options });
  return { store, logger };
}

/**
 * File operations that call onSync for each sync of the record journal: a synced append (an
 * O_DSYNC write) or an fdatasync (a cut).
 */
export function countingJournalSyncs(onSync: () => void): Partial<StoreFs> {
  return {
    appendSynced: async (fd, data) => { onSync(); return nodeStoreFs.appendSynced(fd, data); },
    fdatasync: async (fd) => { onSync(); return nodeStoreFs.fdatasync(fd); },
  };
}
