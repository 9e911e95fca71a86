import { mkdir, readdir, readFile, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { AgentError } from '../../../src/machine/errors.js';
import { FileMachineStore } from '../../../src/store/file-store.js';
import { type StoreFs, nodeStoreFs } from '../../../src/store/store-fs.js';
import { prng } from '../../support/prng.js';
import { errnoError, makeRecord, newTestStore, useTempStateDir } from '../../support/records.js';

const paths = useTempStateDir();

function newStore(fs?: Partial<StoreFs>) {
  return newTestStore(paths.dir, { fs });
}

const readJson = async (name: string) => JSON.parse(await readFile(path.join(paths.dir, `${name}.json`), 'utf8'));

describe('FileMachineStore', () => {
  it('load creates the directory 0700 and finds nothing', async () => {
    const { store } = newStore();
    expect(await store.load()).toEqual({ records: 0, quarantined: [] });
    expect((await stat(paths.dir)).mode & 0o777).toBe(0o700);
  });

  it('put writes atomically: one 0600 file, no temp files, bumps resourceVersion', async () => {
    const { store } = newStore();
    await store.load();
    const first = await store.put(makeRecord('web-1'));
    expect(first.resourceVersion).toBe(1);
    const second = await store.put({ ...first, annotations: { a: 'b' } });
    expect(second.resourceVersion).toBe(2);
    expect(await readdir(paths.dir)).toEqual(['web-1.json']);
    expect((await stat(path.join(paths.dir, 'web-1.json'))).mode & 0o777).toBe(0o600);
    expect(await readJson('web-1')).toEqual(second);
    // A stale copy never moves the version backwards.
    expect((await store.put(first)).resourceVersion).toBe(3);
  });

  it('hands out frozen records that cannot be changed behind its back', async () => {
    const { store } = newStore();
    await store.load();
    const input = makeRecord('a');
    const stored = await store.put(input);
    input.annotations.w = 'changed'; // the caller's own object stays its own
    expect(() => (stored.annotations.x = 'changed')).toThrow(TypeError);
    expect(() => (store.get('a')!.annotations.y = 'changed')).toThrow(TypeError);
    expect(() => (store.list()[0]!.status.state = 'error')).toThrow(TypeError);
    expect(store.get('a')!.annotations).toEqual({ owner: 'test' });
  });

  it('a new store loads what the old one wrote, sorted', async () => {
    const { store } = newStore();
    await store.load();
    for (const name of ['c', 'a', 'b']) await store.put(makeRecord(name));
    const { store: again } = newStore();
    expect(await again.load()).toEqual({ records: 3, quarantined: [] });
    expect(again.list().map((r) => r.name)).toEqual(['a', 'b', 'c']);
    expect(again.get('a')).toEqual(store.get('a'));
  });

  it('keeps list() sorted and current through puts and removes made after a list', async () => {
    const { store } = newStore();
    await store.load();
    const random = prng(12);
    const names = ['b', 'a-1', 'a', 'z', 'web-10', 'web-9', 'web-1', 'm', 'a0', '0'];
    store.list(); // the sorted view exists from here on, and each change must keep it right
    for (let step = 0; step < 120; step++) {
      const name = names[Math.floor(random() * names.length)]!;
      if (store.get(name) && random() < 0.4) await store.remove(name);
      else await store.put({ ...(store.get(name) ?? makeRecord(name)), annotations: { step: String(step) } });
      const listed = store.list();
      const expected = names.filter((n) => store.get(n)).sort();
      expect(listed.map((r) => r.name)).toEqual(expected);
      expect(listed.map((r) => r.annotations.step)).toEqual(expected.map((n) => store.get(n)!.annotations.step));
    }
  });

  it.each([
    { name: 'corrupt JSON', file: 'bad.json', content: '{"apiVersion": "vmkeeper/v1", ', reason: /^not valid JSON/ },
    { name: 'foreign apiVersion', file: 'old.json', content: JSON.stringify({ ...makeRecord('old'), apiVersion: 'vmkeeper/v0' }), reason: /^apiVersion: must be "vmkeeper\/v1"/ },
    { name: 'name does not match file', file: 'one.json', content: JSON.stringify(makeRecord('two')), reason: /^name: does not match the file name "one.json"/ },
    { name: 'invalid file name', file: 'Bad_Name.json', content: JSON.stringify(makeRecord('Bad_Name')), reason: /^name: is not a valid machine name/ },
    { name: 'missing field', file: 'x.json', content: JSON.stringify({ ...makeRecord('x'), status: undefined }), reason: /^status: must be an object/ },
    { name: 'wrong type', file: 'y.json', content: JSON.stringify({ ...makeRecord('y'), resourceVersion: '3' }), reason: /^resourceVersion: must be a number/ },
    { name: 'bad state', file: 'z.json', content: JSON.stringify({ ...makeRecord('z'), status: { ...makeRecord('z').status, state: 'dancing' } }), reason: /^status.state: / },
    { name: 'empty file', file: 'e.json', content: '', reason: /^not valid JSON/ },
  ])('quarantines $name with a warning and loads the rest', async ({ file, content, reason }) => {
    await mkdir(paths.dir, { recursive: true });
    await writeFile(path.join(paths.dir, file), content);
    await writeFile(path.join(paths.dir, 'good.json'), JSON.stringify(makeRecord('good')));
    const { store, logger } = newStore();
    const result = await store.load();
    const movedTo = path.join(paths.root, 'quarantine', `${file}.2025-01-02T03-04-05.000Z`);
    expect(result.records).toBe(1);
    expect(result.quarantined).toEqual([{ file: path.join(paths.dir, file), movedTo, reason: expect.stringMatching(reason) }]);
    expect(await readFile(movedTo, 'utf8')).toBe(content);
    expect(await readdir(paths.dir)).toEqual(['good.json']);
    expect(store.list().map((r) => r.name)).toEqual(['good']);
    expect(logger.lines).toContainEqual({
      level: 'warn',
      message: 'quarantined a damaged machine record',
      fields: { file: path.join(paths.dir, file), movedTo, reason: expect.stringMatching(reason) },
    });
  });

  it('quarantines an unreadable entry (a directory named x.json)', async () => {
    await mkdir(path.join(paths.dir, 'x.json'), { recursive: true });
    const { store } = newStore();
    const { quarantined } = await store.load();
    expect(quarantined[0]!.reason).toBe('not a regular file (a directory)');
  });

  it('a file that cannot be quarantined is skipped with an error log, not a crash', async () => {
    await mkdir(paths.dir, { recursive: true });
    await writeFile(path.join(paths.dir, 'bad.json'), 'nope');
    const { store, logger } = newStore({ rename: async () => Promise.reject(errnoError('EROFS', 'rename')) });
    expect(await store.load()).toEqual({ records: 0, quarantined: [] });
    expect(logger.lines.map((l) => l.level)).toEqual(['error']);
  });

  it('deletes temp files left by a crash and ignores other files', async () => {
    await mkdir(paths.dir, { recursive: true });
    await writeFile(path.join(paths.dir, 'a.json'), JSON.stringify(makeRecord('a')));
    await writeFile(path.join(paths.dir, 'a.json.tmp-1f2e3d'), '{"half":');
    await writeFile(path.join(paths.dir, 'README'), 'not a record');
    const { store, logger } = newStore();
    expect(await store.load()).toEqual({ records: 1, quarantined: [] });
    expect((await readdir(paths.dir)).sort()).toEqual(['README', 'a.json']);
    expect(logger.lines[0]).toMatchObject({ level: 'info', fields: { file: path.join(paths.dir, 'a.json.tmp-1f2e3d') } });
  });

  it('concurrent puts of one record serialise: versions 1..N, file holds the last', async () => {
    const order: string[] = [];
    // Slow, observable writes: an interleaving would show as two opens before a rename.
    const { store } = newStore({
      async open(p, flags, mode) {
        order.push(`open ${path.basename(p).replace(/tmp-.*/, 'tmp')}`);
        await new Promise((r) => setTimeout(r, 2));
        return nodeStoreFs.open(p, flags, mode);
      },
      async rename(from, to) {
        order.push('rename');
        return nodeStoreFs.rename(from, to);
      },
    });
    await store.load();
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) => store.put(makeRecord('busy', { annotations: { i: String(i) } }))),
    );
    expect(results.map((r) => r.resourceVersion)).toEqual(Array.from({ length: 20 }, (_, i) => i + 1));
    expect(await readJson('busy')).toMatchObject({ resourceVersion: 20, annotations: { i: '19' } });
    const writes = order.filter((o) => o !== 'open machines');
    for (let i = 0; i < writes.length; i += 2) expect(writes.slice(i, i + 2)).toEqual(['open busy.json.tmp', 'rename']);
    expect(await readdir(paths.dir)).toEqual(['busy.json']);
  });

  it('puts of different records run in parallel', async () => {
    const { store } = newStore();
    await store.load();
    await Promise.all(['a', 'b', 'c'].map((n) => store.put(makeRecord(n))));
    expect(store.list().map((r) => r.resourceVersion)).toEqual([1, 1, 1]);
  });

  it('remove is idempotent and durable', async () => {
    const { store } = newStore();
    await store.load();
    await store.put(makeRecord('gone'));
    await store.remove('gone');
    await store.remove('gone');
    await store.remove('never-existed');
    expect(store.get('gone')).toBeUndefined();
    expect(await readdir(paths.dir)).toEqual([]);
  });

  it('rejects names that are not machine names', async () => {
    const { store } = newStore();
    await store.load();
    await expect(store.remove('../etc')).rejects.toMatchObject({ kind: 'InvalidName' });
    await expect(store.put(makeRecord('../x'))).rejects.toMatchObject({ kind: 'InvalidName' });
  });

  describe('a failing write leaves memory and disk unchanged', () => {
    const fail = (code: string, syscall: string) => async () => Promise.reject(errnoError(code, syscall));
    it.each([
      { op: 'write', fs: { write: fail('ENOSPC', 'write') }, message: /: write failed: ENOSPC \(no space left on device\)$/ },
      { op: 'fsync', fs: { fsync: fail('EIO', 'fsync') }, message: /: fsync failed: EIO \(i\/o error\)$/ },
      { op: 'rename', fs: { rename: fail('ENOSPC', 'rename') }, message: /: rename failed: ENOSPC/ },
      { op: 'open', fs: { open: fail('EROFS', 'open') }, message: /: create temp file failed: EROFS/ },
    ] as { op: string; fs: Partial<StoreFs>; message: RegExp }[])('$op fails', async ({ fs: failing, message }) => {
      const { store: writer } = newStore();
      await writer.load();
      const before = await writer.put(makeRecord('vm'));
      const onDisk = await readFile(path.join(paths.dir, 'vm.json'), 'utf8');

      const { store } = newStore();
      await store.load();
      // Fail only from now on (load itself must still work).
      Object.assign((store as unknown as { fs: StoreFs }).fs, failing);
      const err = await store.put({ ...before, annotations: { changed: 'yes' } }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(AgentError);
      expect(err).toMatchObject({ kind: 'StorageFailure' });
      const text = (err as Error).message;
      expect(text).toContain(path.join(paths.dir, 'vm.json'));
      expect(text).toMatch(message);
      expect(text).not.toContain('\n');
      expect((err as Error).cause).toMatchObject({ code: expect.any(String) });
      expect(store.get('vm')).toEqual(before);
      expect(await readFile(path.join(paths.dir, 'vm.json'), 'utf8')).toBe(onDisk);
      expect(await readdir(paths.dir)).toEqual(['vm.json']);
    });
  });
});
