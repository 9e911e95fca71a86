import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { silentLogger } from '../../../src/logging/logger.js';
import { cloneRecord } from '../../../src/machine/record.js';
import { FileMachineStore } from '../../../src/store/file-store.js';
import { type StoreFs, nodeStoreFs } from '../../../src/store/store-fs.js';
import { makeRecord } from '../../support/records.js';

// Issue 12: 8 concurrent writers on a real disk must share folder fsyncs (group commit) and stay
// far from one fsync chain per write. Margins are wide: the goal is 2,000 writes/s, a machine under
// load did ~1,000 in the bench; this fails only at an order of magnitude below that (100/s), or if
// every write fsyncs the folder again.

let root = '';
afterEach(async () => {
  if (root) await rm(root, { recursive: true, force: true });
});

describe('group commit on a real disk', () => {
  it('8 writers x 100 durable writes: folder fsyncs shared, >= 100 writes/s', async () => {
    root = await mkdtemp(path.join(tmpdir(), 'vmkeeper-group-'));
    const dir = path.join(root, 'machines');
    const dirFds = new Set<number>();
    let dirSyncs = 0;
    const fs: Partial<StoreFs> = {
      async open(p, flags, mode) {
        const fd = await nodeStoreFs.open(p, flags, mode);
        if (p === dir) dirFds.add(fd);
        return fd;
      },
      async close(fd) {
        dirFds.delete(fd);
        return nodeStoreFs.close(fd);
      },
      async fsync(fd) {
        if (dirFds.has(fd)) dirSyncs++;
        return nodeStoreFs.fsync(fd);
      },
    };
    const store = new FileMachineStore({ dir, logger: silentLogger, fs });
    await store.load();
    const writers = 8;
    const perWriter = 100;
    const start = performance.now();
    await Promise.all(Array.from({ length: writers }, async (_, w) => {
      let record = makeRecord(`vm${w}`);
      for (let i = 0; i < perWriter; i++) {
        const next = cloneRecord(record);
        next.annotations = { n: String(i) };
        record = await store.put(next);
      }
      expect(record.resourceVersion).toBe(perWriter);
    }));
    const perSec = (writers * perWriter) / ((performance.now() - start) / 1000);
    console.log(`group commit: ${perSec.toFixed(0)} writes/s, ${dirSyncs} folder fsyncs for ${writers * perWriter} writes`);
    // One folder fsync per write would be 800; batches of 8 make ~100.
    expect(dirSyncs).toBeLessThan((writers * perWriter) / 3);
    expect(perSec).toBeGreaterThan(100);
    expect(store.list().map((r) => r.annotations.n)).toEqual(Array.from({ length: writers }, () => String(perWriter - 1)));
  });
});
