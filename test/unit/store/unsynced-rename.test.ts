import { readFile, readdir } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { type StoreFs, nodeStoreFs } from '../../../src/store/store-fs.js';
import { errnoError, makeRecord, newTestStore, useTempStateDir } from '../../support/records.js';

// Issue 10: a directory fsync that fails after the rename left the caller told "failed" while
// disk (and every restart) had the new record. What the caller is told must be what a restart sees.

const paths = useTempStateDir();

/** nodeStoreFs whose fsync of the records directory fails while `dirSyncFails()` says so. */
function failingDirSync(dirSyncFails: () => boolean, more: Partial<StoreFs> = {}): Partial<StoreFs> {
  const dirFds = new Set<number>();
  return {
    async open(p, flags, mode) {
      const fd = await nodeStoreFs.open(p, flags, mode);
      if (p === paths.dir) dirFds.add(fd);
      return fd;
    },
    async close(fd) {
      dirFds.delete(fd);
      return nodeStoreFs.close(fd);
    },
    async fsync(fd) {
      if (dirFds.has(fd) && dirSyncFails()) throw errnoError('EIO', 'fsync');
      return nodeStoreFs.fsync(fd);
    },
    ...more,
  };
}

const onDisk = async (name: string) => JSON.parse(await readFile(path.join(paths.dir, `${name}.json`), 'utf8'));
const restartSees = async (name: string) => {
  const { store } = newTestStore(paths.dir);
  await store.load();
  return store.get(name);
};

describe('a directory fsync that fails after the rename', () => {
  it('puts the old record back: caller, memory and a restart agree on the old one', async () => {
    let failures = 0;
    const { store } = newTestStore(paths.dir, { fs: failingDirSync(() => failures-- > 0) });
    await store.load();
    const before = await store.put(makeRecord('vm'));
    failures = 1;
    const err = await store.put({ ...before, annotations: { changed: 'yes' } }).catch((e: unknown) => e);
    expect(err).toMatchObject({ kind: 'StorageFailure', message: expect.stringMatching(/fsync of directory .* failed: EIO/) });
    expect(store.get('vm')).toEqual(before);
    expect(await onDisk('vm')).toEqual(before);
    expect(await restartSees('vm')).toEqual(before);
    expect(await readdir(paths.dir)).toEqual(['vm.json']);
  });

  it('removes a newly created file: no record anywhere', async () => {
    // The first directory fsync (after the rename) fails, the undo's succeeds.
    let dirSyncs = 0;
    const { store } = newTestStore(paths.dir, { fs: failingDirSync(() => dirSyncs++ === 0) });
    await store.load();
    await expect(store.put(makeRecord('fresh'))).rejects.toMatchObject({ kind: 'StorageFailure' });
    expect(store.get('fresh')).toBeUndefined();
    expect(await readdir(paths.dir)).toEqual([]);
    expect(await restartSees('fresh')).toBeUndefined();
  });

  it('when the undo fails too, memory follows the directory and the log says so', async () => {
    let renames = 0;
    let failing = false;
    const { store, logger } = newTestStore(paths.dir, {
      fs: failingDirSync(() => failing, {
        async rename(from, to) {
          if (failing && renames++ > 0) throw errnoError('EIO', 'rename'); // the undo's rename
          return nodeStoreFs.rename(from, to);
        },
      }),
    });
    await store.load();
    const before = await store.put(makeRecord('vm'));
    failing = true;
    const err = await store.put({ ...before, annotations: { changed: 'yes' } }).catch((e: unknown) => e);
    expect(err).toMatchObject({ kind: 'StorageFailure', message: expect.stringMatching(/undoing it failed too \(the new record stays\)$/) });
    const now = store.get('vm')!;
    expect(now).toMatchObject({ resourceVersion: before.resourceVersion + 1, annotations: { changed: 'yes' } });
    expect(await onDisk('vm')).toEqual(now);
    expect(logger.lines).toContainEqual(expect.objectContaining({ level: 'error', message: 'cannot undo an unsynced record change; memory follows the directory' }));
    expect(await readdir(paths.dir)).toEqual(['vm.json']);
  });

  it('when only the undo\'s fsync fails, the old record is in the directory and in memory', async () => {
    let failing = false;
    const { store, logger } = newTestStore(paths.dir, { fs: failingDirSync(() => failing) });
    await store.load();
    const before = await store.put(makeRecord('vm'));
    failing = true;
    const err = await store.put({ ...before, annotations: { changed: 'yes' } }).catch((e: unknown) => e);
    expect(err).toMatchObject({ kind: 'StorageFailure', message: expect.stringMatching(/undone, but the undo may not survive a power cut\)$/) });
    expect(store.get('vm')).toEqual(before);
    expect(await onDisk('vm')).toEqual(before);
    expect(logger.lines.filter((l) => l.level === 'error')).toHaveLength(1);
  });
});

describe('a directory fsync that fails after removing a record', () => {
  it('writes the record back: caller, memory and a restart still have it; a retry removes it', async () => {
    let failures = 0;
    const { store } = newTestStore(paths.dir, { fs: failingDirSync(() => failures-- > 0) });
    await store.load();
    const kept = await store.put(makeRecord('vm'));
    failures = 1;
    await expect(store.remove('vm')).rejects.toMatchObject({ kind: 'StorageFailure' });
    expect(store.get('vm')).toEqual(kept);
    expect(await onDisk('vm')).toEqual(kept);
    expect(await restartSees('vm')).toEqual(kept);
    await store.remove('vm');
    expect(store.get('vm')).toBeUndefined();
    expect(await restartSees('vm')).toBeUndefined();
  });

  it('when the write-back\'s fsync fails too, memory keeps the record now back in the directory, and the log says so', async () => {
    let failing = false;
    const { store, logger } = newTestStore(paths.dir, { fs: failingDirSync(() => failing) });
    await store.load();
    await store.put(makeRecord('vm'));
    failing = true;
    await expect(store.remove('vm')).rejects.toMatchObject({ message: expect.stringMatching(/undoing it failed too \(undone, but the undo may not survive a power cut\)$/) });
    // The rewrite landed in the directory (only its fsync failed): memory has the record.
    expect(store.get('vm')).toBeDefined();
    expect(logger.lines.map((l) => l.level)).toEqual(['error']);
  });
});
