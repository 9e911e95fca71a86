import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ShutdownRecords } from '../../../src/hostshutdown/shutdown-records.js';
import type { ShutdownRecord } from '../../../src/hostshutdown/stop-procedure.js';
import { nodeStoreFs, type StoreFs } from '../../../src/store/store-fs.js';
import { capturingLogger } from './fake-platform.js';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'vmk-shutdowns-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const T0 = Date.UTC(2026, 11, 5, 8, 1, 2);

function record(id: string, startedAt: number, result: ShutdownRecord['result'] = 'completed'): ShutdownRecord {
  return {
    id, kind: 'host-shutdown', result, startedAt, finishedAt: result === 'in-progress' ? 0 : startedAt + 5000, boundSec: 120,
    groups: [{ minPriority: 0, budgetSec: 120, startedAt, finishedAt: startedAt + 5000 }],
    machines: [{ machine: 'web', domain: 'vmkeeper-web', action: 'save', priority: 0, group: 0, result: 'saved', afterMs: 4000, detail: 'saved' }],
  };
}

async function open(keep?: number) {
  const logger = capturingLogger();
  const store = new ShutdownRecords({ dir, logger, keep });
  await store.load();
  return { store, logger };
}

describe('shutdown records', () => {
  it('ids: the start time to the second, then a counter that keeps them unique', async () => {
    const { store } = await open();
    expect(store.newId(T0)).toBe('20261205T080102Z-1');
    await store.save(record('20261205T080102Z-1', T0));
    expect(store.newId(T0 + 300)).toBe('20261205T080102Z-2');
  });

  it('each save replaces the file whole; a new store reads them back, oldest first', async () => {
    const { store } = await open();
    const r = record(store.newId(T0), T0, 'in-progress');
    await store.save(r);
    expect(JSON.parse(await readFile(path.join(dir, `${r.id}.json`), 'utf8')).result).toBe('in-progress');
    await store.save({ ...r, result: 'completed', finishedAt: T0 + 9000 });
    await store.save(record(store.newId(T0 + 60_000), T0 + 60_000));
    expect((await readdir(dir)).sort()).toEqual(['20261205T080102Z-1.json', '20261205T080202Z-1.json']);
    const { store: again } = await open();
    expect(again.list().map((x) => [x.id, x.result])).toEqual([['20261205T080102Z-1', 'completed'], ['20261205T080202Z-1', 'completed']]);
    expect(again.get('20261205T080102Z-1')).toEqual({ ...r, result: 'completed', finishedAt: T0 + 9000 });
    expect(again.get('nope')).toBeUndefined();
  });

  it('a record still in progress at load was cut off: it becomes interrupted, on disk too', async () => {
    await writeFile(path.join(dir, '20261205T080102Z-1.json'), JSON.stringify(record('20261205T080102Z-1', T0, 'in-progress')));
    const { store, logger } = await open();
    expect(store.get('20261205T080102Z-1')!.result).toBe('interrupted');
    expect(JSON.parse(await readFile(path.join(dir, '20261205T080102Z-1.json'), 'utf8')).result).toBe('interrupted');
    expect(logger.lines.filter((l) => l.startsWith('warn'))).toHaveLength(1);
  });

  it('keeps the newest ones: older files are deleted', async () => {
    const { store } = await open(3);
    for (let i = 0; i < 5; i++) await store.save(record(store.newId(T0 + i * 1000), T0 + i * 1000));
    expect(store.list().map((r) => r.id)).toEqual(['20261205T080104Z-1', '20261205T080105Z-1', '20261205T080106Z-1']);
    expect((await readdir(dir)).sort()).toEqual(['20261205T080104Z-1.json', '20261205T080105Z-1.json', '20261205T080106Z-1.json']);
  });

  it('unreadable files are skipped with one warning; leftover temp files are removed', async () => {
    await writeFile(path.join(dir, '20261205T080102Z-1.json'), '{ not json');
    await writeFile(path.join(dir, '20261205T080103Z-1.json'), JSON.stringify({ id: '20261205T080103Z-1', kind: 'reboot' }));
    await writeFile(path.join(dir, '20261205T080104Z-1.json'), JSON.stringify(record('20261205T080159Z-1', T0)));
    await writeFile(path.join(dir, '20261205T080105Z-1.json'), JSON.stringify(record('20261205T080105Z-1', T0 + 3000)));
    await writeFile(path.join(dir, '20261205T080106Z-1.json.tmp-0123456789ab'), 'half');
    const { store, logger } = await open();
    expect(store.list().map((r) => r.id)).toEqual(['20261205T080105Z-1']);
    const warnings = logger.lines.filter((l) => l.startsWith('warn'));
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatch(/^warn skipped 3 unreadable shutdown records in .*: 20261205T080102Z-1\.json \(.*\); 20261205T080103Z-1\.json \(not a shutdown record: kind\); 20261205T080104Z-1\.json \(its id 20261205T080159Z-1 does not match the file name\)$/);
    expect(await readdir(dir)).not.toContain('20261205T080106Z-1.json.tmp-0123456789ab');
  });

  it('a write goes temp file, fsync, rename, folder fsync; a failed write leaves no temp file and the old file', async () => {
    const steps: string[] = [];
    let failRename = false;
    const fs: StoreFs = {
      ...nodeStoreFs,
      open: async (p, flags, mode) => (steps.push(`open ${path.basename(p).replace(/tmp-\w+/, 'tmp')}`), nodeStoreFs.open(p, flags, mode)),
      fsync: async (fd) => (steps.push('fsync'), nodeStoreFs.fsync(fd)),
      rename: async (from, to) => {
        steps.push('rename');
        if (failRename) throw Object.assign(new Error('EIO'), { code: 'EIO' });
        return nodeStoreFs.rename(from, to);
      },
    };
    const store = new ShutdownRecords({ dir, logger: capturingLogger(), fs });
    await store.load();
    const r = record('20261205T080102Z-1', T0);
    await store.save(r);
    expect(steps).toEqual(['open 20261205T080102Z-1.json.tmp', 'fsync', 'rename', `open ${path.basename(dir)}`, 'fsync']);
    failRename = true;
    await expect(store.save({ ...r, result: 'cancelled' })).rejects.toThrow('EIO');
    expect(await readdir(dir)).toEqual(['20261205T080102Z-1.json']);
    expect(JSON.parse(await readFile(path.join(dir, '20261205T080102Z-1.json'), 'utf8')).result).toBe('completed');
  });

  it('without a folder the records live in memory only', async () => {
    const store = new ShutdownRecords({ logger: capturingLogger() });
    await store.load();
    await store.save(record('20261205T080102Z-1', T0));
    expect(store.list()).toHaveLength(1);
  });
});
