import { readFile, readdir } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import type { Clock } from '../../../src/lifecycle/clock.js';
import { type StoreFs, nodeStoreFs } from '../../../src/store/store-fs.js';
import { FakeClock } from '../../support/fakes/fake-clock.js';
import { makeRecord, newTestStore, useTempStateDir } from '../../support/records.js';
import { waitFor } from '../../support/wait.js';

// Record files trail the journal by at most fileLagMs while writes keep coming: after a quiet
// spell a batch writes its files before its answers; within the lag its files wait, and one
// update writes every record changed since, once each.

const paths = useTempStateDir();
const LAG = 100;

function lagged(fs: Partial<StoreFs> = {}, clock: Clock = new FakeClock()) {
  const renames: string[] = [];
  const { store, logger } = newTestStore(paths.dir, {
    journalFile: path.join(paths.root, 'journal', 'records.log'),
    fileLagMs: LAG,
    clock,
    fs: {
      rename: async (from, to) => {
        renames.push(path.basename(to));
        return nodeStoreFs.rename(from, to);
      },
      ...fs,
    },
  });
  return { store, logger, clock, renames };
}

async function annotationOnDisk(name: string): Promise<string | undefined> {
  const text = await readFile(path.join(paths.dir, `${name}.json`), 'utf8').catch(() => undefined);
  return text === undefined ? undefined : (JSON.parse(text) as { annotations?: Record<string, string> }).annotations?.n;
}

const withN = (name: string, n: number) => ({ ...makeRecord(name), annotations: { n: String(n) } });

describe('record files trailing the journal', () => {
  it('after a quiet spell the file holds the change when the write is answered', async () => {
    const { store } = lagged();
    await store.load();
    await store.put(withN('a', 1));
    expect(await annotationOnDisk('a')).toBe('1');
  });

  it('within the lag the answers do not wait for files; one update at the lag writes each record once, its newest', async () => {
    const { store, clock, renames } = lagged();
    await store.load();
    await store.put(withN('a', 0)); // quiet before: written before the answer, the lag starts here
    renames.length = 0;
    for (let n = 1; n <= 5; n++) {
      await store.put(withN('a', n));
      await store.put(withN('b', n));
    }
    expect(store.get('a')?.annotations).toEqual({ n: '5' });
    expect(renames, 'no file written inside the lag').toEqual([]);
    expect(await annotationOnDisk('a')).toBe('0');
    expect(await annotationOnDisk('b')).toBeUndefined();
    await (clock as FakeClock).advance(LAG);
    await waitFor(() => renames.length >= 2, { timeoutMs: 5000, what: 'both files written' });
    expect(renames.sort()).toEqual(['a.json', 'b.json']);
    expect(await annotationOnDisk('a')).toBe('5');
    expect(await annotationOnDisk('b')).toBe('5');
  });

  it('a batch that comes after the lag writes every file that waited before its answer', async () => {
    // A clock whose timers never fire: the next batch must catch up by itself.
    let now = Date.UTC(2026, 0, 1);
    const stuck: Clock = { now: () => now, setTimer: () => ({ cancel: () => {} }), sleep: () => new Promise(() => {}) };
    const { store } = lagged({}, stuck);
    await store.load();
    await store.put(withN('a', 0));
    await store.put(withN('a', 1));
    expect(await annotationOnDisk('a')).toBe('0');
    now += LAG;
    await store.put(withN('b', 1));
    expect(await annotationOnDisk('a')).toBe('1');
    expect(await annotationOnDisk('b')).toBe('1');
  });

  it('a removal inside the lag deletes the file at the update', async () => {
    const { store, clock, renames } = lagged();
    await store.load();
    await store.put(withN('gone', 0));
    await store.remove('gone');
    expect(await readdir(paths.dir)).toContain('gone.json');
    await (clock as FakeClock).advance(LAG);
    await waitFor(async () => !(await readdir(paths.dir)).includes('gone.json'), { timeoutMs: 5000, what: 'gone.json removed' });
    expect(renames).toEqual(['gone.json']);
  });

  it('close brings the files up to date', async () => {
    const { store } = lagged();
    await store.load();
    await store.put(withN('a', 0));
    await store.put(withN('a', 1));
    await store.close();
    expect(await annotationOnDisk('a')).toBe('1');
  });

  it('a file that cannot be written is logged; the write stays answered and durable in the journal', async () => {
    let fail = false;
    const { store, logger } = lagged({
      open: async (p, flags, mode) => {
        if (fail && String(p).includes('.tmp-')) throw Object.assign(new Error('EIO: i/o error'), { code: 'EIO' });
        return nodeStoreFs.open(p, flags, mode);
      },
    });
    await store.load();
    fail = true;
    await expect(store.put(withN('a', 1))).resolves.toMatchObject({ name: 'a' });
    expect(logger.lines.some((e) => e.message.includes('cannot update a record file'))).toBe(true);
    fail = false;
    await store.close();
    const { store: again } = lagged();
    await again.load();
    expect(again.get('a')?.annotations).toEqual({ n: '1' });
    expect(await annotationOnDisk('a')).toBe('1');
  });
});
