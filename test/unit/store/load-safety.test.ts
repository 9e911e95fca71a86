import { execFileSync } from 'node:child_process';
import { mkdir, mkdtemp, readdir, rm, symlink, truncate, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { MAX_RECORD_BYTES } from '../../../src/store/file-store.js';
import { makeRecord, newTestStore, useTempStateDir } from '../../support/records.js';

// Issue 15: the state dir gets backups, restores and hand edits. Load reads only regular files of
// bounded size, never follows a link, never blocks, and logs a reason without the file's content.

const paths = useTempStateDir();
const SECRET = 'root:$6$SECRETHASH$abc:19000:0:99999:7:::';

async function plant(file: string, make: (full: string) => Promise<unknown>): Promise<void> {
  await mkdir(paths.dir, { recursive: true });
  await writeFile(path.join(paths.dir, 'good.json'), JSON.stringify(makeRecord('good')));
  await make(path.join(paths.dir, file));
}

describe('load reads only what is safe', () => {
  it.each([
    { what: 'a FIFO (would block start-up forever)', make: async (p: string) => execFileSync('mkfifo', [p]), reason: 'not a regular file (a FIFO)' },
    { what: 'a symlink to /dev/zero (would read without end)', make: (p: string) => symlink('/dev/zero', p), reason: 'is a symbolic link' },
    { what: 'a symlink to a valid record', make: async (p: string) => symlink(path.join(paths.dir, 'good.json'), p), reason: 'is a symbolic link' },
    { what: 'a 1 GB sparse file', make: async (p: string) => (await writeFile(p, '{'), truncate(p, 1024 ** 3)), reason: `larger than ${MAX_RECORD_BYTES} bytes (${1024 ** 3})` },
  ])('quarantines $what with its reason, loads the rest', async ({ make, reason }) => {
    await plant('bad.json', make);
    const { store, logger } = newTestStore(paths.dir);
    const started = Date.now();
    const result = await store.load();
    expect(Date.now() - started, 'load time in ms').toBeLessThan(2000);
    expect(result.records).toBe(1);
    expect(result.quarantined).toEqual([expect.objectContaining({ file: path.join(paths.dir, 'bad.json'), reason })]);
    expect(await readdir(paths.dir)).toEqual(['good.json']);
    expect(logger.lines.filter((l) => l.message.includes('quarantine'))).toHaveLength(1);
  });

  it.each([
    { what: 'not JSON (a copy of /etc/shadow)', content: SECRET, reason: 'not valid JSON at byte 0' },
    { what: 'JSON broken after the secret', content: `{"apiVersion": "${SECRET}",}`, reason: `not valid JSON at byte ${`{"apiVersion": "${SECRET}",`.length}` },
    { what: 'a secret as apiVersion', content: JSON.stringify({ ...makeRecord('bad'), apiVersion: SECRET }), reason: 'apiVersion: must be "vmkeeper/v1" or "vmkeeper/v2"' },
    { what: 'a secret as name', content: JSON.stringify({ ...makeRecord('bad'), name: SECRET }), reason: 'name: is not a valid machine name' },
    { what: 'a secret as an unknown spec key', content: JSON.stringify({ ...makeRecord('bad'), spec: { ...makeRecord('bad').spec, [SECRET]: 1 } }), reason: 'spec.[a key not shown]: unknown key' },
  ])('logs the reason, never the content: $what', async ({ content, reason }) => {
    await plant('bad.json', (p) => writeFile(p, content));
    const { store, logger } = newTestStore(paths.dir);
    const { quarantined } = await store.load();
    expect(quarantined).toEqual([expect.objectContaining({ reason: typeof reason === 'string' ? reason : expect.stringMatching(reason) })]);
    const logged = JSON.stringify(logger.lines);
    expect(logged).not.toContain('SECRETHASH');
    expect(logger.lines).toHaveLength(1);
  });

  it('a secret as annotation key: the annotation is dropped, the machine loaded, the key never logged', async () => {
    await plant('bad.json', (p) => writeFile(p, JSON.stringify({ ...makeRecord('bad'), annotations: { [SECRET]: 'x' } })));
    const { store, logger } = newTestStore(paths.dir);
    const result = await store.load();
    expect(result).toEqual(expect.objectContaining({ records: 2, quarantined: [] }));
    expect(logger.lines.map((l) => l.message)).toEqual(['repaired a machine record on load']);
    expect(JSON.stringify(logger.lines)).not.toContain('SECRETHASH');
  });

  it('never follows a quarantine folder that is a symlink', async () => {
    const elsewhere = await mkdtemp(path.join(tmpdir(), 'vmkeeper-elsewhere-'));
    try {
      await plant('bad.json', (p) => writeFile(p, 'nope'));
      await symlink(elsewhere, path.join(paths.root, 'quarantine'));
      const { store, logger } = newTestStore(paths.dir);
      expect(await store.load()).toEqual({ records: 1, quarantined: [] });
      expect(await readdir(elsewhere)).toEqual([]);
      expect(store.get('bad')).toBeUndefined();
      expect(logger.lines).toEqual([
        expect.objectContaining({
          level: 'error',
          message: 'cannot quarantine a damaged machine record; ignoring it',
          fields: expect.objectContaining({ reason: 'not valid JSON at byte 1', error: expect.stringMatching(/is a symlink, not a directory: not following it$/) }),
        }),
      ]);
    } finally {
      await rm(elsewhere, { recursive: true, force: true });
    }
  });
});
