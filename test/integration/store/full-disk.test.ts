import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmdirSync } from 'node:fs';
import { readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { silentLogger } from '../../../src/logging/logger.js';
import { FileMachineStore } from '../../../src/store/file-store.js';
import { makeRecord } from '../../support/records.js';

// A real ENOSPC from the kernel: a 64 KiB tmpfs, filled up. Needs root (or CAP_SYS_ADMIN).
const mnt = mkdtempSync(path.join(tmpdir(), 'vmkeeper-full-'));
let mountError: string | undefined;
try {
  execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=64k,mode=0700', 'tmpfs', mnt], { stdio: 'pipe' });
} catch (err) {
  mountError = ((err as { stderr?: Buffer }).stderr?.toString() || String(err)).trim();
  console.warn(`SKIPPED full-disk test: cannot mount a tmpfs (${mountError}); run as root to include it`);
}

afterAll(() => {
  if (!mountError) execFileSync('umount', [mnt]);
  rmdirSync(mnt);
});

/** Fills the file system with 1 KiB writes until the kernel says ENOSPC. */
async function fill(file: string): Promise<void> {
  const chunk = Buffer.alloc(1024, 'x');
  let size = 0;
  for (;;) {
    try {
      await writeFile(file, chunk, { flag: 'a' });
      size += chunk.length;
    } catch (err) {
      expect((err as NodeJS.ErrnoException).code).toBe('ENOSPC');
      return;
    }
    if (size > 1024 * 1024) throw new Error('tmpfs did not fill up');
  }
}

describe.skipIf(mountError !== undefined)('FileMachineStore on a full disk', () => {
  it('fails with StorageFailure, leaves nothing half-written, recovers when space returns', async () => {
    const dir = path.join(mnt, 'machines');
    const store = new FileMachineStore({ dir, logger: silentLogger });
    await store.load();
    const before = await store.put(makeRecord('vm'));
    const onDisk = await readFile(path.join(dir, 'vm.json'), 'utf8');

    const filler = path.join(mnt, 'filler');
    await fill(filler);

    const big = { ...before, annotations: { note: 'y'.repeat(3000) } };
    const err = await store.put(big).catch((e: unknown) => e);
    expect(err).toMatchObject({ kind: 'StorageFailure' });
    expect((err as Error).message).toMatch(/vm\.json: write failed: ENOSPC \(no space left on device\)$/);
    // A new record fails the same way and leaves no file behind.
    await expect(store.put(makeRecord('fresh', { annotations: { note: 'z'.repeat(3000) } }))).rejects.toMatchObject({ kind: 'StorageFailure' });

    expect(store.get('vm')).toEqual(before);
    expect(store.get('fresh')).toBeUndefined();
    expect(await readFile(path.join(dir, 'vm.json'), 'utf8')).toBe(onDisk);
    expect(await readdir(dir)).toEqual(['vm.json']);

    await rm(filler);
    const after = await store.put(big);
    expect(after.resourceVersion).toBe(before.resourceVersion + 1);
    await store.put(makeRecord('fresh'));
    expect((await readdir(dir)).sort()).toEqual(['fresh.json', 'vm.json']);

    const reloaded = new FileMachineStore({ dir, logger: silentLogger });
    expect(await reloaded.load()).toEqual({ records: 2, quarantined: [] });
    expect(reloaded.get('vm')).toEqual(after);
  });

  it('with the journal: a failed append is cut off, memory, files and journal unchanged; recovers when space returns', async () => {
    const dir = path.join(mnt, 'machines-j');
    const journalFile = path.join(mnt, 'journal', 'records.log');
    // No reserve: on a 64 KiB tmpfs it would refuse every write; this is the kernel's ENOSPC path.
    const store = new FileMachineStore({ dir, journalFile, logger: silentLogger, minFreeBytes: 0 });
    await store.load();
    const before = await store.put(makeRecord('vm'));
    const onDisk = await readFile(path.join(dir, 'vm.json'), 'utf8');
    const journalBefore = await readFile(journalFile);

    const filler = path.join(mnt, 'filler-j');
    await fill(filler);

    const big = { ...before, annotations: { note: 'y'.repeat(3000) } };
    const err = await store.put(big).catch((e: unknown) => e);
    expect(err).toMatchObject({ kind: 'StorageFailure' });
    expect((err as Error).message).toMatch(/cannot append to the journal .*ENOSPC/);
    expect(store.get('vm')).toEqual(before);
    expect(await readFile(path.join(dir, 'vm.json'), 'utf8')).toBe(onDisk);
    expect(await readFile(journalFile)).toEqual(journalBefore);

    await rm(filler);
    const after = await store.put(big);
    expect(after.resourceVersion).toBe(before.resourceVersion + 1);
    await store.close();
    const reloaded = new FileMachineStore({ dir, journalFile, logger: silentLogger, minFreeBytes: 0 });
    expect(await reloaded.load()).toEqual({ records: 1, quarantined: [] });
    expect(reloaded.get('vm')).toEqual(after);
    await reloaded.close();
  });
});
