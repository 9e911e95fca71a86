import { copyFile, mkdir, readFile, readdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { RECORD_API_VERSION, cloneRecord } from '../../../src/machine/record.js';
import { migrateToCurrent } from '../../../src/store/record-migration.js';
import { InvalidStoredRecord } from '../../../src/store/record-validation.js';
import { errnoError, makeRecord, newTestStore, useTempStateDir } from '../../support/records.js';

// The on-disk format is versioned: a record of the previous release (vmkeeper/v1) loads, is
// migrated in memory, and is written as vmkeeper/v2 on its next change, crash-safely as any write.

const V1_FIXTURE = fileURLToPath(new URL('../../fixtures/records/v1/web-1.json', import.meta.url));
const paths = useTempStateDir();
const fileOf = (name: string) => path.join(paths.dir, `${name}.json`);

async function plantV1(): Promise<string> {
  await mkdir(paths.dir, { recursive: true });
  await copyFile(V1_FIXTURE, fileOf('web-1'));
  return readFile(V1_FIXTURE, 'utf8');
}

describe('a record of the previous release (vmkeeper/v1)', () => {
  it('loads, migrated in memory: the unread fields gone, domainDefined kept, the file untouched', async () => {
    const original = await plantV1();
    const { store, logger } = newTestStore(paths.dir);
    expect(await store.load()).toEqual({ records: 1, quarantined: [] });
    const loaded = store.get('web-1')!;
    const v1 = JSON.parse(original);
    expect(loaded.apiVersion).toBe('vmkeeper/v2');
    expect(loaded).not.toHaveProperty('finalizers');
    expect(loaded.status).not.toHaveProperty('createdFiles');
    expect(loaded.status.domainDefined).toBe(true);
    expect({ ...loaded.annotations }).toEqual(v1.annotations);
    expect(loaded.spec).toEqual(v1.spec);
    expect(await readFile(fileOf('web-1'), 'utf8')).toBe(original);
    expect(logger.lines).toEqual([
      expect.objectContaining({ level: 'info', fields: { from: 'vmkeeper/v1', to: 'vmkeeper/v2', records: 1 } }),
    ]);
  });

  it('is written as vmkeeper/v2 on its next change and round-trips', async () => {
    await plantV1();
    const { store } = newTestStore(paths.dir);
    await store.load();
    const changed = cloneRecord(store.get('web-1')!);
    changed.status.message = 'changed';
    const stored = await store.put(changed);
    const onDisk = JSON.parse(await readFile(fileOf('web-1'), 'utf8'));
    expect(onDisk).toEqual(stored);
    expect(onDisk.apiVersion).toBe(RECORD_API_VERSION);
    expect(Object.keys(onDisk)).not.toContain('finalizers');
    const { store: again, logger } = newTestStore(paths.dir);
    await again.load();
    expect(again.get('web-1')).toEqual(stored);
    expect(logger.lines).toEqual([]);
  });

  it('a crash during that first write leaves the v1 file, which loads again', async () => {
    const original = await plantV1();
    const { store } = newTestStore(paths.dir, { fs: { rename: async () => Promise.reject(errnoError('EIO', 'rename')) } });
    await store.load();
    await expect(store.put(cloneRecord(store.get('web-1')!))).rejects.toMatchObject({ kind: 'StorageFailure' });
    expect(await readdir(paths.dir)).toEqual(['web-1.json']);
    expect(await readFile(fileOf('web-1'), 'utf8')).toBe(original);
    const { store: again } = newTestStore(paths.dir);
    expect(await again.load()).toEqual({ records: 1, quarantined: [] });
  });
});

describe('a record of a newer vmkeeper', () => {
  it('is quarantined with that reason, never guessed at', async () => {
    await mkdir(paths.dir, { recursive: true });
    const content = JSON.stringify({ ...makeRecord('next'), apiVersion: 'vmkeeper/v3', newField: 1 });
    await writeFile(fileOf('next'), content);
    const { store } = newTestStore(paths.dir);
    const { quarantined } = await store.load();
    expect(quarantined).toEqual([
      expect.objectContaining({ reason: 'apiVersion: written by a newer vmkeeper (vmkeeper/v3); this one reads vmkeeper/v1 and vmkeeper/v2' }),
    ]);
    expect(await readFile(quarantined[0]!.movedTo, 'utf8')).toBe(content);
  });
});

describe('migrateToCurrent', () => {
  const reasonFor = (apiVersion: unknown) => {
    try {
      migrateToCurrent({ ...makeRecord('vm'), apiVersion });
    } catch (err) {
      expect(err).toBeInstanceOf(InvalidStoredRecord);
      return (err as Error).message;
    }
    throw new Error('accepted');
  };

  it('leaves a current record as it is', () => {
    const current = { ...makeRecord('vm') };
    expect(migrateToCurrent(current)).toEqual({ record: current });
  });

  it.each([
    { apiVersion: 'vmkeeper/v0', reason: 'apiVersion: must be "vmkeeper/v1" or "vmkeeper/v2"' },
    { apiVersion: 'vmkeeper/v02', reason: 'apiVersion: must be "vmkeeper/v1" or "vmkeeper/v2"' },
    { apiVersion: 'vmkeeper/v3-secret', reason: 'apiVersion: must be "vmkeeper/v1" or "vmkeeper/v2"' },
    { apiVersion: undefined, reason: 'apiVersion: must be "vmkeeper/v1" or "vmkeeper/v2"' },
    { apiVersion: 'vmkeeper/v10', reason: 'apiVersion: written by a newer vmkeeper (vmkeeper/v10); this one reads vmkeeper/v1 and vmkeeper/v2' },
  ])('refuses apiVersion $apiVersion', ({ apiVersion, reason }) => {
    expect(reasonFor(apiVersion)).toBe(reason);
  });
});
