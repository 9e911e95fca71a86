import { readFile, readdir } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { type StoreFs, nodeStoreFs } from '../../../src/store/store-fs.js';
import { errnoError, makeRecord, newTestStore, useTempStateDir } from '../../support/records.js';

// Group commit (issue 12): writes that arrive while a batch is committed form the next batch,
// which fsyncs the records folder once; nobody is answered before their record is durable.

const paths = useTempStateDir();

interface Counting {
  fs: Partial<StoreFs>;
  dirSyncs: number;
  fileSyncs: string[];
  /** While set, each folder fsync waits for it (after saying so through onDirSync). */
  holdDirSync?: Promise<void>;
  onDirSync?: () => void;
  onFileSync?: (name: string) => void;
}

/** nodeStoreFs that counts fsyncs of the folder and of files, and can hold a folder fsync. */
function counting(more: (c: Counting) => Partial<StoreFs> = () => ({})): Counting {
  const dirFds = new Set<number>();
  const fdPaths = new Map<number, string>();
  const c: Counting = { fs: {}, dirSyncs: 0, fileSyncs: [] };
  c.fs = {
    async open(p, flags, mode) {
      const fd = await nodeStoreFs.open(p, flags, mode);
      if (p === paths.dir) dirFds.add(fd);
      else fdPaths.set(fd, p);
      return fd;
    },
    async close(fd) {
      dirFds.delete(fd);
      fdPaths.delete(fd);
      return nodeStoreFs.close(fd);
    },
    async fsync(fd) {
      if (dirFds.has(fd)) {
        c.dirSyncs++;
        c.onDirSync?.();
        if (c.holdDirSync) await c.holdDirSync;
      } else {
        const name = path.basename(fdPaths.get(fd) ?? '?').replace(/\.json\.tmp-.*$/, '');
        c.fileSyncs.push(name);
        c.onFileSync?.(name);
      }
      return nodeStoreFs.fsync(fd);
    },
    ...more(c),
  };
  return c;
}

const onDisk = async (name: string) => JSON.parse(await readFile(path.join(paths.dir, `${name}.json`), 'utf8'));
const restartSees = async (name: string) => {
  const { store } = newTestStore(paths.dir);
  await store.load();
  return store.get(name);
};
const deferred = () => {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
};

describe('group commit', () => {
  it('writes issued together share one folder fsync, one file fsync each', async () => {
    const c = counting();
    const { store } = newTestStore(paths.dir, { fs: c.fs });
    await store.load();
    const names = Array.from({ length: 8 }, (_, i) => `vm${i}`);
    const stored = await Promise.all(names.map((n) => store.put(makeRecord(n))));
    expect(stored.map((r) => r.resourceVersion)).toEqual(names.map(() => 1));
    expect(c.dirSyncs).toBe(1);
    expect(c.fileSyncs.sort()).toEqual(names);
    for (const n of names) expect(await onDisk(n)).toMatchObject({ name: n, resourceVersion: 1 });
  });

  it('writes arriving while a batch commits join the next batch; nobody is answered early; reads do not wait', async () => {
    const c = counting();
    const { store } = newTestStore(paths.dir, { fs: c.fs });
    await store.load();
    await store.put(makeRecord('a', { annotations: { v: 'old' } }));
    expect(c.dirSyncs).toBe(1);

    const hold = deferred();
    const reached = deferred();
    c.holdDirSync = hold.promise;
    c.onDirSync = reached.resolve;
    const answered: string[] = [];
    const first = store.put(makeRecord('a', { resourceVersion: 1, annotations: { v: 'new' } })).then((r) => { answered.push('first'); return r; });
    await reached.promise;
    // The first batch is waiting on its folder fsync: these form the next batch.
    const later = ['b', 'c', 'd', 'e'].map((n) => store.put(makeRecord(n)).then((r) => { answered.push(n); return r; }));
    expect(store.get('a')!.annotations).toEqual({ v: 'old' });
    expect(store.list().map((r) => r.name)).toEqual(['a']);
    expect(answered).toEqual([]);

    c.holdDirSync = undefined;
    hold.resolve();
    expect((await first).annotations).toEqual({ v: 'new' });
    await Promise.all(later);
    expect(answered[0]).toBe('first');
    expect(c.dirSyncs).toBe(3); // the first write, its batch, one for the four that queued behind it
    expect(store.list().map((r) => r.name)).toEqual(['a', 'b', 'c', 'd', 'e']);
  });

  it('the next batch writes its temp files while the previous one fsyncs the folder, but renames after it', async () => {
    const c = counting();
    const { store } = newTestStore(paths.dir, { fs: c.fs });
    await store.load();
    const hold = deferred();
    const reached = deferred();
    const bSynced = deferred();
    c.holdDirSync = hold.promise;
    c.onDirSync = reached.resolve;
    c.onFileSync = (name) => name === 'b' && bSynced.resolve();
    const a = store.put(makeRecord('a'));
    await reached.promise;
    const b = store.put(makeRecord('b'));
    await bSynced.promise;
    // b's temp file is durable, but it is not renamed while a's batch is not.
    expect((await readdir(paths.dir)).filter((f) => f.startsWith('b.json'))).toEqual([expect.stringMatching(/^b\.json\.tmp-/)]);
    expect(c.dirSyncs).toBe(1);
    c.holdDirSync = undefined;
    hold.resolve();
    await Promise.all([a, b]);
    expect(c.dirSyncs).toBe(2);
    expect((await readdir(paths.dir)).sort()).toEqual(['a.json', 'b.json']);
  });

  it('two writes to one record in one batch: the later wins, both answered after it is durable', async () => {
    const c = counting();
    const { store } = newTestStore(paths.dir, { fs: c.fs });
    await store.load();
    const [one, two] = await Promise.all([
      store.put(makeRecord('vm', { annotations: { n: '1' } })),
      store.put(makeRecord('vm', { annotations: { n: '2' } })),
    ]);
    expect(one.resourceVersion).toBe(1);
    expect(two.resourceVersion).toBe(2);
    expect(await onDisk('vm')).toMatchObject({ resourceVersion: 2, annotations: { n: '2' } });
    expect(store.get('vm')).toMatchObject({ resourceVersion: 2, annotations: { n: '2' } });
    expect(c.fileSyncs).toEqual(['vm']);
    expect(c.dirSyncs).toBe(1);

    // A put then a remove in one batch: the remove wins.
    await Promise.all([store.put(makeRecord('vm', { resourceVersion: 2 })), store.remove('vm')]);
    expect(store.get('vm')).toBeUndefined();
    expect(await readdir(paths.dir)).toEqual([]);
  });

  it('a temp file that cannot be written fails the whole batch; memory and disk stay as they were', async () => {
    let failWrites = false;
    let writes = 0;
    const c = counting(() => ({
      async write(fd, data) {
        // The second temp file of the batch fails.
        if (failWrites && ++writes === 2) throw errnoError('ENOSPC', 'write');
        return nodeStoreFs.write(fd, data);
      },
    }));
    const { store } = newTestStore(paths.dir, { fs: c.fs });
    await store.load();
    await store.put(makeRecord('a', { annotations: { v: 'old' } }));
    failWrites = true;
    const results = await Promise.allSettled([
      store.put(makeRecord('a', { resourceVersion: 1, annotations: { v: 'new' } })),
      store.put(makeRecord('b')),
      store.put(makeRecord('c')),
    ]);
    for (const r of results) {
      expect(r).toMatchObject({ status: 'rejected', reason: { kind: 'StorageFailure', message: expect.stringMatching(/write failed: ENOSPC/) } });
    }
    expect(await readdir(paths.dir)).toEqual(['a.json']);
    expect(await onDisk('a')).toMatchObject({ annotations: { v: 'old' } });
    expect(store.list().map((r) => [r.name, r.annotations])).toEqual([['a', { v: 'old' }]]);
    expect(c.dirSyncs).toBe(1); // the batch never reached the folder

    failWrites = false;
    expect(await store.put(makeRecord('b'))).toMatchObject({ name: 'b' });
  });

  it('a rename that fails in the middle of a batch undoes the renames done, with one more folder fsync', async () => {
    const c = counting(() => ({
      async rename(from, to) {
        if (path.basename(to) === 'b.json') throw errnoError('EIO', 'rename');
        return nodeStoreFs.rename(from, to);
      },
    }));
    const { store } = newTestStore(paths.dir, { fs: c.fs });
    await store.load();
    await store.put(makeRecord('a', { annotations: { v: 'old' } }));
    const results = await Promise.allSettled([
      store.put(makeRecord('a', { resourceVersion: 1, annotations: { v: 'new' } })),
      store.put(makeRecord('b')),
      store.put(makeRecord('c')),
    ]);
    for (const r of results) expect(r).toMatchObject({ status: 'rejected', reason: { kind: 'StorageFailure' } });
    expect((await readdir(paths.dir)).sort()).toEqual(['a.json']);
    expect(await onDisk('a')).toMatchObject({ annotations: { v: 'old' } });
    expect(store.get('a')!.annotations).toEqual({ v: 'old' });
    expect(store.get('c')).toBeUndefined();
    expect(await restartSees('c')).toBeUndefined();
    expect(c.dirSyncs).toBe(2); // the first write, the undo (the failed batch never fsynced)
  });

  it('a folder fsync that fails undoes the whole batch: every caller is told, a restart sees the old records', async () => {
    let failDirSync = false;
    const base = counting();
    // The next folder fsync fails (after it is counted); the undo's own one succeeds.
    const c = { fs: { ...base.fs, async fsync(fd: number) {
      const before = base.dirSyncs;
      await base.fs.fsync!(fd);
      if (failDirSync && base.dirSyncs > before) {
        failDirSync = false;
        throw errnoError('EIO', 'fsync');
      }
    } } };
    const { store } = newTestStore(paths.dir, { fs: c.fs });
    await store.load();
    await store.put(makeRecord('a', { annotations: { v: 'old' } }));
    failDirSync = true;
    const results = await Promise.allSettled([
      store.put(makeRecord('a', { resourceVersion: 1, annotations: { v: 'new' } })),
      store.put(makeRecord('b')),
    ]);
    for (const r of results) {
      expect(r).toMatchObject({ status: 'rejected', reason: { kind: 'StorageFailure', message: expect.stringMatching(/fsync of directory .* failed: EIO/) } });
    }
    expect(base.dirSyncs).toBe(3); // the first write, the failed one, the undo
    expect(await readdir(paths.dir)).toEqual(['a.json']);
    expect(store.get('a')!.annotations).toEqual({ v: 'old' });
    expect(store.get('b')).toBeUndefined();
    expect((await restartSees('a'))!.annotations).toEqual({ v: 'old' });
    expect(await restartSees('b')).toBeUndefined();
  });
});
