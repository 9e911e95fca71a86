import { readFile, rename, stat, truncate, unlink, utimes, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { nodeStoreFs, type StoreFs } from '../../../src/store/store-fs.js';
import { FakeClock } from '../../support/fakes/fake-clock.js';
import { waitFor } from '../../support/wait.js';
import type { FileMachineStoreOptions } from '../../../src/store/file-store.js';
import { makeRecord, makeV1Record, newTestStore, useTempStateDir } from '../../support/records.js';

// The snapshot written at close lets the next load skip reading and checking each record file,
// but only for files still exactly as they were: every way an operator or a restore can change a
// file must bring that file's own content back, and a bad snapshot must change nothing.

const paths = useTempStateDir();
const KEY = 'test-release {"limits":1}';

/** Options for a store with a snapshot (and a journal), counting the record files it reads whole. */
function snapshotted(key = KEY, journal = true): { options: Partial<FileMachineStoreOptions>; filesRead: () => number } {
  let reads = 0;
  const fs: Partial<StoreFs> = {
    readStampedFile: (file, max) => (reads++, nodeStoreFs.readStampedFile(file, max)),
  };
  return {
    options: {
      fs,
      ...(journal ? { journalFile: path.join(paths.root, 'journal', 'records.log') } : {}),
      snapshot: { file: path.join(paths.root, 'records.snapshot'), key },
    },
    filesRead: () => reads,
  };
}

/** Records written and closed, then loaded and closed again: that load empties the journal, so from here the files alone hold the records. */
async function seed(names: string[], journal = true): Promise<void> {
  const { store } = newTestStore(paths.dir, snapshotted(KEY, journal).options);
  await store.load();
  for (const name of names) await store.put(makeRecord(name));
  await store.close();
  const settle = newTestStore(paths.dir, snapshotted(KEY, journal).options).store;
  await settle.load();
  await settle.close();
}

/** A fresh store on the same state, loaded: the records, its log and how many files it read whole. */
async function loadAgain(key = KEY, journal = true) {
  const { options, filesRead } = snapshotted(key, journal);
  const { store, logger } = newTestStore(paths.dir, options);
  const loaded = await store.load();
  return { store, logger, loaded, filesRead };
}

const fileOf = (name: string) => path.join(paths.dir, `${name}.json`);

/**
 * Waits until the file system's clock has moved past the file's change time, so an edit gets a
 * change time of its own: kernels before 6.13 keep it at the resolution of a timer tick, and an
 * edit within the tick of the store's own write (keeping size and times) would look unchanged.
 */
async function afterFileSystemTick(file: string): Promise<void> {
  const { ctimeNs } = await stat(file, { bigint: true });
  const probe = path.join(paths.root, 'clock-probe');
  await waitFor(async () => {
    await writeFile(probe, '');
    return (await stat(probe, { bigint: true })).ctimeNs > ctimeNs;
  }, { timeoutMs: 5_000, intervalMs: 1, what: 'the file system clock to pass the record file\'s change time' });
}

describe('record snapshot', () => {
  it('a load after a clean close reads no record file, and gives the same frozen records', async () => {
    await seed(['a', 'b', 'c']);
    const before = newTestStore(paths.dir).store;
    await before.load();
    const { options, filesRead } = snapshotted();
    const { store } = newTestStore(paths.dir, options);
    await expect(store.load()).resolves.toMatchObject({ records: 3, quarantined: [] });
    expect(filesRead()).toBe(0);
    expect(store.list()).toEqual(before.list());
    expect(Object.isFrozen(store.get('a')!.spec.disks[0])).toBe(true);
    // And the store goes on as usual: a write, then a snapshot that holds it.
    await store.put({ ...store.get('b')!, annotations: { owner: 'changed' } });
    await store.close();
    const again = snapshotted();
    const next = newTestStore(paths.dir, again.options).store;
    await next.load();
    expect(again.filesRead()).toBe(0);
    expect(next.get('b')!.annotations).toEqual({ owner: 'changed' });
  });

  it('a file edited in place after the stop is read, even at the same size and with its old times', async () => {
    await seed(['a', 'b']);
    const file = fileOf('a');
    await afterFileSystemTick(file);
    const { mtime, atime, size } = await stat(file);
    const text = await readFile(file, 'utf8');
    const edited = text.replace('"owner": "test"', '"owner": "edit"');
    expect(edited).not.toBe(text);
    await writeFile(file, edited); // same inode, same size
    await utimes(file, atime, mtime); // as cp -p or touch -r would leave it
    expect((await stat(file)).size).toBe(size);
    const { store, filesRead } = await loadAgain();
    expect(filesRead()).toBe(1);
    expect(store.get('a')!.annotations).toEqual({ owner: 'edit' });
    expect(store.get('b')!.annotations).toEqual({ owner: 'test' });
  });

  it('a removed file is a removed record, and an added or restored one is read', async () => {
    await seed(['a', 'b']);
    // And the temp file of a snapshot write cut short goes.
    const leftover = path.join(paths.root, 'records.snapshot.tmp-0a1b2c3d4e5f');
    await writeFile(leftover, 'half');
    await unlink(fileOf('a'));
    await writeFile(fileOf('c'), JSON.stringify(makeRecord('c')));
    const { store, filesRead } = await loadAgain();
    expect(store.list().map((r) => r.name)).toEqual(['b', 'c']);
    expect(filesRead()).toBe(1);
    await expect(stat(leftover)).rejects.toThrow(/ENOENT/);
  });

  it('a file another process changes while the store runs is read at the next load, also one the store wrote', async () => {
    // Without a journal, whose replay would bring the store's own write of "a" back over any file.
    await seed(['a', 'b'], false);
    const { store } = newTestStore(paths.dir, snapshotted(KEY, false).options);
    await store.load();
    await store.put({ ...store.get('a')!, annotations: { owner: 'agent' } });
    await afterFileSystemTick(fileOf('a'));
    // A restore over both files while the store runs (rename of a copy, then an in-place write).
    const restored = path.join(paths.root, 'restored.json');
    await writeFile(restored, JSON.stringify(makeRecord('a', { annotations: { owner: 'restored' } })));
    await rename(restored, fileOf('a'));
    await writeFile(fileOf('b'), JSON.stringify(makeRecord('b', { annotations: { owner: 'restored' } })));
    await store.close();
    const { store: next, filesRead } = await loadAgain(KEY, false);
    expect(filesRead()).toBe(2);
    expect(next.get('a')!.annotations).toEqual({ owner: 'restored' });
    expect(next.get('b')!.annotations).toEqual({ owner: 'restored' });
  });

  it('a damaged file with a snapshot entry is quarantined as without one', async () => {
    await seed(['a', 'b']);
    await writeFile(fileOf('a'), '{"name": "a", ');
    const { store, logger } = newTestStore(paths.dir, snapshotted().options);
    const loaded = await store.load();
    expect(loaded.quarantined).toHaveLength(1);
    expect(loaded.quarantined[0]!.reason).toMatch(/not valid JSON/);
    expect(store.list().map((r) => r.name)).toEqual(['b']);
    expect(logger.lines.some((l) => l.message === 'quarantined a damaged machine record')).toBe(true);
  });

  it.each([
    ['written under other rules', async () => {}, 'other-release {"limits":2}', /other rules/],
    ['torn', () => truncate(path.join(paths.root, 'records.snapshot'), 200), KEY, /torn or damaged/],
    ['damaged', async () => {
      const file = path.join(paths.root, 'records.snapshot');
      await writeFile(file, (await readFile(file, 'utf8')).replace('"owner":"test"', '"owner":"evil"'));
    }, KEY, /checksum/],
  ])('a snapshot %s is not used: every file is read, and the log says why', async (_what, spoil, key, why) => {
    await seed(['a', 'b']);
    await spoil();
    const { options, filesRead } = snapshotted(key as string);
    const { store, logger } = newTestStore(paths.dir, options);
    await store.load();
    expect(filesRead()).toBe(2);
    expect(store.get('a')!.annotations).toEqual({ owner: 'test' });
    const line = logger.lines.find((l) => l.message.startsWith('record snapshot not used'));
    expect(String(line?.fields?.why)).toMatch(why as RegExp);
  });

  it('a record read in an older format stays out of it: each start reads it and says so again', async () => {
    await seed(['b']);
    await writeFile(fileOf('old'), JSON.stringify(makeV1Record('old')));
    for (let start = 0; start < 2; start++) {
      const { options, filesRead } = snapshotted();
      const { store, logger } = newTestStore(paths.dir, options);
      await store.load();
      expect(filesRead()).toBe(1);
      expect(logger.lines.some((l) => l.message.startsWith('read machine records of an older format'))).toBe(true);
      await store.close();
    }
  });

  it('close waits for a write still under way, and the snapshot holds it', async () => {
    await seed(['a']);
    const { store } = newTestStore(paths.dir, snapshotted().options);
    await store.load();
    const written = store.put(makeRecord('late'));
    await store.close();
    await written;
    const { options, filesRead } = snapshotted();
    const next = newTestStore(paths.dir, options).store;
    await next.load();
    expect(next.get('late')).toBeDefined();
    expect(filesRead()).toBe(0);
  });

  it('close gives up on a write stuck on the disk: it writes no snapshot under it, and refuses later writes', async () => {
    await seed(['a']);
    let stall = false;
    let release!: () => void;
    const stuck = new Promise<void>((resolve) => (release = resolve));
    const { options } = snapshotted();
    options.fs = { ...options.fs, appendSynced: async (fd, data) => (stall && (await stuck), nodeStoreFs.appendSynced(fd, data)) };
    const { store } = newTestStore(paths.dir, options);
    await store.load();
    const snapshotFile = path.join(paths.root, 'records.snapshot');
    const before = (await stat(snapshotFile, { bigint: true })).mtimeNs;
    stall = true;
    const pending = store.put(makeRecord('late'));
    await store.close(50);
    expect((await stat(snapshotFile, { bigint: true })).mtimeNs).toBe(before);
    await expect(store.put(makeRecord('after'))).rejects.toThrow(/record store is closed/);
    release();
    await pending.catch(() => undefined);
  });

  it('a crash after the start leaves the snapshot stale: the journal brings every acknowledged change back over it', async () => {
    await seed(['a', 'b', 'c', 'd']);
    // A clock that never moves: after the first batch (which writes its file before it answers)
    // the files trail the journal, so the crash finds b and c as the snapshot knows them.
    const { options } = snapshotted();
    const { store } = newTestStore(paths.dir, { ...options, clock: new FakeClock() });
    await store.load();
    await store.put({ ...store.get('a')!, annotations: { owner: 'written' } });
    await store.remove('b');
    await store.put({ ...store.get('c')!, annotations: { owner: 'journalled' } });
    await store.put(makeRecord('e'));
    expect(JSON.parse(await readFile(fileOf('c'), 'utf8')).annotations).toEqual({ owner: 'test' });
    await stat(fileOf('b'));
    // The crash: no close, so no checkpoint and no new snapshot. A new store loads the same state.
    const { store: next, filesRead } = await loadAgain();
    expect(filesRead()).toBe(1); // a's file: the only one whose stamp moved
    expect(next.list().map((r) => [r.name, r.annotations.owner])).toEqual([['a', 'written'], ['c', 'journalled'], ['d', 'test'], ['e', 'test']]);
    // Its load checkpointed the replayed changes: the files alone hold them now.
    await expect(stat(fileOf('b'))).rejects.toThrow(/ENOENT/);
    expect(JSON.parse(await readFile(fileOf('c'), 'utf8')).annotations).toEqual({ owner: 'journalled' });
    await next.close();
    const { store: last, filesRead: lastRead } = await loadAgain();
    expect(lastRead()).toBe(0);
    expect(last.list().map((r) => [r.name, r.annotations.owner])).toEqual([['a', 'written'], ['c', 'journalled'], ['d', 'test'], ['e', 'test']]);
  });
});
