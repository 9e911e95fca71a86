import { readFile, readdir, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { MIN_FREE_BYTES, type FileMachineStoreOptions } from '../../../src/store/file-store.js';
import { FakeClock } from '../../support/fakes/fake-clock.js';
import { waitFor } from '../../support/wait.js';
import { decodeJournal, encodeBatch } from '../../../src/store/record-journal.js';
import { type StoreFs, nodeStoreFs } from '../../../src/store/store-fs.js';
import { countingJournalSyncs, errnoError, makeRecord, newTestStore, useTempStateDir } from '../../support/records.js';

// The store with a write-ahead journal: one journal sync per batch, record files written through
// before the answer, replay at load (newest wins, a remove deletes), checkpoint empties the journal.

const paths = useTempStateDir();
const journalOf = () => path.join(paths.root, 'journal', 'records.log');

function journaled(fs: Partial<StoreFs> = {}, checkpointBytes?: number, options: Partial<FileMachineStoreOptions> = {}) {
  return newTestStore(paths.dir, { journalFile: journalOf(), fs, checkpointBytes, ...options });
}

async function fileRecord(name: string) {
  return JSON.parse(await readFile(path.join(paths.dir, `${name}.json`), 'utf8'));
}

describe('FileMachineStore with a journal', () => {
  it('concurrent writes share one journal sync and no record file fsync; files are current at the answer', async () => {
    let syncs = 0;
    let fileFsyncs = 0;
    const { store } = journaled({
      ...countingJournalSyncs(() => syncs++),
      fsync: async (fd) => { fileFsyncs++; return nodeStoreFs.fsync(fd); },
    });
    await store.load();
    const before = syncs;
    const fsyncsBefore = fileFsyncs;
    const written = await Promise.all(['a', 'b', 'c', 'd'].map((n) => store.put(makeRecord(n))));
    expect(syncs - before).toBe(1);
    expect(fileFsyncs - fsyncsBefore).toBe(0);
    for (const r of written) expect((await fileRecord(r.name)).resourceVersion).toBe(r.resourceVersion);
    expect((await stat(journalOf())).size).toBeGreaterThan(0);
  });

  it('replays the journal over stale record files at load: newest wins, a remove deletes, then checkpoints', async () => {
    await writeFile(path.join(paths.root, 'placeholder'), '');
    const { store: first } = journaled();
    await first.load();
    await first.put(makeRecord('keep'));
    await first.put(makeRecord('gone'));
    // Stale files as after a power cut that lost unsynced write-through: the journal must win.
    const journal = Buffer.concat([
      await readFile(journalOf()),
      encodeBatch([{ name: 'keep', record: { ...makeRecord('keep'), resourceVersion: 7, annotations: { v: 'new' } } }, { name: 'gone', record: null }]),
    ]);
    await writeFile(journalOf(), journal);
    const { store } = journaled();
    await store.load();
    expect(store.get('keep')?.annotations).toEqual({ v: 'new' });
    expect(store.get('keep')?.resourceVersion).toBe(7);
    expect(store.get('gone')).toBeUndefined();
    expect((await fileRecord('keep')).resourceVersion).toBe(7);
    expect(await readdir(paths.dir)).toEqual(['keep.json']);
    expect((await stat(journalOf())).size).toBe(0);
  });

  it('drops a torn journal tail at load and keeps the whole batches', async () => {
    const { store: first } = journaled();
    await first.load();
    const stored = await first.put(makeRecord('a'));
    const torn = encodeBatch([{ name: 'b', record: makeRecord('b') }]).subarray(0, 20);
    await writeFile(journalOf(), Buffer.concat([await readFile(journalOf()), torn]));
    const { store, logger } = journaled();
    await store.load();
    expect(store.get('a')?.resourceVersion).toBe(stored.resourceVersion);
    expect(store.get('b')).toBeUndefined();
    expect(logger.lines.some((l) => l.message.includes('torn tail'))).toBe(true);
  });

  it('checkpoints once the journal passes its size: files durable, journal emptied, writes still answered', async () => {
    let truncates = 0;
    const { store } = journaled({ ftruncate: async (fd, n) => { truncates++; return nodeStoreFs.ftruncate(fd, n); } }, 1);
    await store.load();
    await store.put(makeRecord('a'));
    // The checkpoint runs after the answer, before the next batch: a second write waits for it.
    await store.put(makeRecord('b'));
    expect(truncates).toBeGreaterThanOrEqual(1);
    const { store: again } = journaled();
    await again.load();
    expect(again.get('a')?.resourceVersion).toBe(1);
    expect(again.get('b')?.resourceVersion).toBe(1);
  });

  it('a clean close checkpoints: the files hold every change, synced, and the journal is empty', async () => {
    let syncs = 0;
    const { store } = journaled({ fsync: async (fd) => { syncs++; return nodeStoreFs.fsync(fd); } });
    await store.load();
    await store.put(makeRecord('a'));
    await store.put({ ...makeRecord('a'), annotations: { n: '2' } });
    await store.put(makeRecord('b'));
    await store.remove('b');
    expect((await stat(journalOf())).size).toBeGreaterThan(0);
    syncs = 0;
    await store.close();
    expect((await stat(journalOf())).size).toBe(0);
    expect(syncs, 'the rewritten file and the folder synced').toBeGreaterThanOrEqual(2);
    expect((await fileRecord('a')).annotations).toEqual({ n: '2' });
    expect(await readdir(paths.dir)).toEqual(['a.json']);
  });

  it('a checkpoint that fails at close leaves the journal for the next start and still brings the files up to date', async () => {
    let failFsync = false;
    // Files trailing the journal (a burst: the lag has not passed), so only close writes this one.
    const { store, logger } = journaled({
      fsync: async (fd) => {
        if (failFsync) throw errnoError('EIO', 'fsync');
        return nodeStoreFs.fsync(fd);
      },
    }, undefined, { fileLagMs: 60_000, clock: new FakeClock() });
    await store.load();
    await store.put({ ...makeRecord('a'), annotations: { n: '1' } });
    await store.put({ ...makeRecord('a'), annotations: { n: '2' } });
    expect((await fileRecord('a')).annotations, 'the second write waits for the lag').toEqual({ n: '1' });
    failFsync = true;
    await store.close();
    expect(logger.lines.some((l) => l.level === 'warn' && l.message.includes('cannot checkpoint the record journal at close'))).toBe(true);
    expect((await stat(journalOf())).size).toBeGreaterThan(0);
    expect((await fileRecord('a')).annotations, 'written unsynced after the failed checkpoint').toEqual({ n: '2' });
    const { store: again } = journaled();
    await again.load();
    expect(again.get('a')?.annotations).toEqual({ n: '2' });
  });

  it('a journal append that fails: StorageFailure, memory, record files and journal unchanged', async () => {
    let fail = false;
    const { store } = journaled({
      appendSynced: async (fd, data) => {
        if (fail) {
          await nodeStoreFs.appendSynced(fd, data.subarray(0, 10));
          throw errnoError('ENOSPC', 'write');
        }
        return nodeStoreFs.appendSynced(fd, data);
      },
    });
    await store.load();
    const stored = await store.put(makeRecord('a'));
    const journalBefore = await readFile(journalOf());
    fail = true;
    await expect(store.put({ ...stored, annotations: { v: 'x' } })).rejects.toMatchObject({ kind: 'StorageFailure', message: expect.stringMatching(/ENOSPC/) });
    expect(store.get('a')).toEqual(stored);
    expect(await fileRecord('a')).toEqual(stored);
    expect(await readFile(journalOf())).toEqual(journalBefore);
    fail = false;
    const { store: again } = journaled();
    await again.load();
    expect(again.get('a')).toEqual(stored);
  });

  it('refuses a write on a nearly full file system, leaves the journal as it was, and lets removals through', async () => {
    let free = Number.MAX_SAFE_INTEGER;
    const { store } = journaled({ freeBytes: async () => free });
    await store.load();
    const a = await store.put(makeRecord('a'));
    const journalBefore = await readFile(journalOf());
    free = MIN_FREE_BYTES - 1;
    await expect(store.put(makeRecord('b'))).rejects.toMatchObject({ kind: 'StorageFailure', message: expect.stringMatching(/ENOSPC \(\d+ bytes free/) });
    await expect(store.put({ ...a, annotations: { v: 'x' } })).rejects.toMatchObject({ kind: 'StorageFailure' });
    expect(store.get('b')).toBeUndefined();
    expect(store.get('a')).toEqual(a);
    expect(await readFile(journalOf())).toEqual(journalBefore);
    await store.remove('a');
    expect(store.get('a')).toBeUndefined();
    free = MIN_FREE_BYTES;
    await expect(store.put(makeRecord('b'))).resolves.toMatchObject({ name: 'b' });
  });

  it('in a burst, starts the batch of the writes that came in during a sync before it answers that sync\'s callers', async () => {
    const order: string[] = [];
    let appends = 0;
    let stallNext = false;
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const { store } = journaled({
      appendSynced: async (fd, data) => {
        const n = ++appends;
        order.push(`append ${n}`);
        if (stallNext) {
          stallNext = false;
          await gate;
        }
        return nodeStoreFs.appendSynced(fd, data);
      },
    }, undefined, { clock: new FakeClock() });
    await store.load();
    // After a quiet spell the record files are written before the answer; within fileLagMs of it
    // (the fake clock stands still) the store is in a burst.
    await store.put(makeRecord('warm'));
    order.length = 0;
    stallNext = true;
    const a = store.put(makeRecord('a')).then(() => order.push('a answered'));
    await waitFor(() => order.includes('append 2'));
    const b = store.put(makeRecord('b')).then(() => order.push('b answered'));
    release();
    await Promise.all([a, b]);
    expect(order).toEqual(['append 2', 'append 3', 'a answered', 'b answered']);
    expect(store.get('b')).toBeDefined();
  });

  it('after a torn frame it could not cut back, cuts it before the next write and refuses writes while it cannot: no acknowledged frame follows a torn one', async () => {
    let tear = false;
    let cutFails = false;
    const { store } = journaled({
      appendSynced: async (fd, data) => {
        if (!tear) return nodeStoreFs.appendSynced(fd, data);
        await nodeStoreFs.appendSynced(fd, data.subarray(0, data.length >> 1));
        throw errnoError('EIO', 'write');
      },
      ftruncate: async (fd, n) => {
        if (cutFails) throw errnoError('EIO', 'ftruncate');
        return nodeStoreFs.ftruncate(fd, n);
      },
    });
    await store.load();
    const a = await store.put(makeRecord('a'));
    const whole = (await stat(journalOf())).size;

    tear = true;
    cutFails = true;
    await expect(store.put(makeRecord('b'))).rejects.toMatchObject({ kind: 'StorageFailure', message: expect.stringMatching(/undoing it failed too/) });
    tear = false;
    const torn = (await stat(journalOf())).size;
    expect(torn).toBeGreaterThan(whole);
    await expect(store.put(makeRecord('c'))).rejects.toMatchObject({ kind: 'StorageFailure', message: expect.stringMatching(/cannot be cut off/) });
    expect((await stat(journalOf())).size).toBe(torn);

    cutFails = false;
    const d = await store.put(makeRecord('d'));
    const { batches, validBytes } = decodeJournal(await readFile(journalOf()));
    expect(validBytes).toBe((await stat(journalOf())).size);
    expect(batches.flat().map((op) => op.name)).toEqual(['a', 'd']);

    const { store: again } = journaled();
    await again.load();
    expect(again.get('a')).toEqual(a);
    expect(again.get('d')).toEqual(d);
    expect(again.get('b')).toBeUndefined();
    expect(again.get('c')).toBeUndefined();
  });
});
