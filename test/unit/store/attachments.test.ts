import { readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import type { AttachmentOwner } from '../../../src/store/port.js';
import { decodeJournal } from '../../../src/store/record-journal.js';
import { type StoreFs, nodeStoreFs } from '../../../src/store/store-fs.js';
import { countingJournalSyncs, errnoError, makeRecord, newTestStore, useTempStateDir } from '../../support/records.js';

// Attachments: another part's entries (the event journal's events) ride in the journal frame of
// the record write they belong to, durable with its one sync, given back on load, and secured by
// their owner before a checkpoint empties the journal.

const paths = useTempStateDir();
const journalOf = () => path.join(paths.root, 'journal', 'records.log');

/** An owner that logs what the store asks of it; `secureFails` makes that many secure() calls fail. */
function spyOwner() {
  const owner = {
    steps: [] as string[],
    recovered: [] as unknown[],
    secureFails: 0,
    journalBytesAtSecure: [] as number[],
    recover(entries: unknown[]) {
      owner.steps.push('recover');
      owner.recovered.push(...entries);
    },
    async secure() {
      owner.steps.push('secure');
      owner.journalBytesAtSecure.push((await stat(journalOf())).size);
      if (owner.secureFails > 0) {
        owner.secureFails--;
        throw new Error('EIO: the event journal cannot be written');
      }
    },
  } satisfies AttachmentOwner & Record<string, unknown>;
  return owner;
}

function journaled(owner: AttachmentOwner | undefined, fs: Partial<StoreFs> = {}, checkpointBytes?: number) {
  const { store, logger } = newTestStore(paths.dir, { journalFile: journalOf(), fs, checkpointBytes });
  if (owner) store.carryAttachmentsOf(owner);
  return { store, logger };
}

describe('FileMachineStore: attachments carried in the journal frame', () => {
  it('carries the entry in the write\'s frame, calls carried() before the write resolves, and adds no sync', async () => {
    let syncs = 0;
    const { store } = journaled(spyOwner(), countingJournalSyncs(() => syncs++));
    await store.load();
    const before = syncs;
    const order: string[] = [];
    const put = store.put(makeRecord('a'), { entry: { sequence: 7 }, carried: () => order.push('carried') }).then(() => order.push('resolved'));
    await put;
    expect(order).toEqual(['carried', 'resolved']);
    expect(syncs - before).toBe(1);
    const { batches } = decodeJournal(await readFile(journalOf()));
    expect(batches.at(-1)).toEqual([expect.objectContaining({ name: 'a', attached: [{ sequence: 7 }] })]);
  });

  it('gives the entries back on load before the checkpoint, which waits for secure() and only then empties the journal', async () => {
    const { store } = journaled(spyOwner());
    await store.load();
    await store.put(makeRecord('a'), { entry: { n: 1 }, carried: () => undefined });
    await store.put(makeRecord('b'), { entry: { n: 2 }, carried: () => undefined });
    await store.put(makeRecord('a', { annotations: { v: '2' } }), { entry: { n: 3 }, carried: () => undefined });
    const owner = spyOwner();
    const { store: again } = journaled(owner);
    await again.load();
    expect(owner.recovered).toEqual([{ n: 1 }, { n: 2 }, { n: 3 }]);
    expect(owner.steps).toEqual(['recover', 'secure']);
    expect(owner.journalBytesAtSecure[0]).toBeGreaterThan(0);
    expect((await stat(journalOf())).size).toBe(0);
    expect(again.get('a')?.annotations).toEqual({ v: '2' });
  });

  it('a secure() that fails keeps the journal (and so the entries) until one succeeds; writes are still answered', async () => {
    const owner = spyOwner();
    owner.secureFails = 1;
    const { store, logger } = journaled(owner, {}, 1);
    await store.load();
    await store.put(makeRecord('a'), { entry: { n: 1 }, carried: () => undefined });
    // The checkpoint after that batch failed; this write's batch waits for it, then checkpoints again.
    await store.put(makeRecord('b'), { entry: { n: 2 }, carried: () => undefined });
    expect(logger.lines.some((l) => l.message.startsWith('cannot checkpoint the record journal') && /EIO/.test(String(l.fields?.error)))).toBe(true);
    await store.put(makeRecord('c'));
    expect(owner.steps.filter((s) => s === 'secure').length).toBeGreaterThanOrEqual(2);
    // The second checkpoint found a's frame still there, b's after it.
    expect(owner.journalBytesAtSecure[1]).toBeGreaterThan(owner.journalBytesAtSecure[0]!);
    const recovering = spyOwner();
    const { store: again } = journaled(recovering);
    await again.load();
    expect(again.list().map((r) => r.name)).toEqual(['a', 'b', 'c']);
  });

  it('a failed write never calls carried() unless its frame may be on disk (the undo failed too); a store without a journal ignores attachments', async () => {
    let fails = 0;
    // A failed sync: the append's synced write (its data written, the sync failing), or the cut-back's fdatasync.
    const { store } = journaled(spyOwner(), {
      appendSynced: async (fd, data) => {
        await nodeStoreFs.appendSynced(fd, data);
        if (fails-- > 0) throw errnoError('EIO', 'write');
      },
      fdatasync: async (fd) => { if (fails-- > 0) throw errnoError('EIO', 'fdatasync'); return nodeStoreFs.fdatasync(fd); },
    });
    await store.load();
    fails = 1;
    let carried = 0;
    await expect(store.put(makeRecord('a'), { entry: {}, carried: () => carried++ })).rejects.toMatchObject({ kind: 'StorageFailure' });
    expect(carried).toBe(0);
    // The append's sync and the cut-back's sync both fail: the frame may survive a restart.
    fails = 2;
    await expect(store.put(makeRecord('a'), { entry: {}, carried: () => carried++ })).rejects.toMatchObject({ kind: 'StorageFailure', message: expect.stringContaining('may survive a restart') });
    expect(carried).toBe(1);
    carried = 0;

    const { store: plain } = newTestStore(path.join(paths.root, 'plain'));
    plain.carryAttachmentsOf(spyOwner());
    await plain.load();
    await plain.put(makeRecord('b'), { entry: {}, carried: () => carried++ });
    expect(carried).toBe(0);
  });
});
