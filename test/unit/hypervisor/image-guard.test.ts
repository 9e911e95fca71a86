import { execFileSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { mkdir, rm, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ImageGuard, qemuImgInspector, type ImageInfo, type ImagePaths } from '../../../src/hypervisor/image-guard.js';
import type { QemuImg } from '../../../src/hypervisor/qemu-img.js';
import { isAgentError } from '../../../src/machine/errors.js';

// The file system is real (a temp folder: links, a FIFO, folders); qemu-img is replaced by a table
// of what it would report per file, so every shape of backing chain is cheap to state.

// Made at import: the test tables below are built before beforeAll runs.
const root = mkdtempSync(path.join(os.tmpdir(), 'vmkeeper-guard-'));
const images = path.join(root, 'images');
const at = (...parts: string[]) => path.join(images, ...parts);
const SECRET = 'root:$y$j9T$host-secret';

beforeAll(async () => {
  await mkdir(images);
  await mkdir(path.join(root, 'outside'));
  await writeFile(path.join(root, 'outside', 'shadow'), SECRET);
  for (const f of ['vmlinuz', 'initrd.img', 'base.qcow2', 'mid.qcow2', 'top.qcow2']) await writeFile(at(f), 'image bytes');
  await symlink(path.join(root, 'outside', 'shadow'), at('shadow'));
  await symlink(path.join(root, 'outside'), at('rootdir'));
  await symlink(at('vmlinuz'), at('current-kernel'));
  await symlink(images, path.join(root, 'images-link'));
  await mkdir(at('folder'));
  execFileSync('mkfifo', [at('fifo')]);
});
afterAll(() => rm(root, { recursive: true, force: true }));

/** A guard whose qemu-img reports `chain[file]`; every inspected file is recorded in order. */
function guardWith(chain: Record<string, ImageInfo>, opts: { dirs?: string[]; maxChainDepth?: number } = {}) {
  const inspected: string[] = [];
  const guard = new ImageGuard({
    imageDirectories: opts.dirs ?? [images],
    maxChainDepth: opts.maxChainDepth,
    inspect: async (file) => {
      inspected.push(file);
      const info = chain[file];
      if (!info) throw new Error('qemu-img: not an image');
      return info;
    },
  });
  return { guard, inspected };
}

const disk = (image: string): ImagePaths => ({ disks: [{ name: 'root', image }] });
const qcow2 = (backing?: string, extra: Partial<ImageInfo> = {}): ImageInfo => ({
  format: 'qcow2',
  ...(backing !== undefined ? { backingFilename: backing, backingFormat: 'qcow2' } : {}),
  ...extra,
});

async function refusal(check: Promise<void>): Promise<string> {
  const err = await check.then(
    () => undefined,
    (e: unknown) => e,
  );
  if (!isAgentError(err, 'InvalidSpec')) throw new Error(`expected InvalidSpec, got ${String(err)}`);
  expect(err.message).not.toContain('host-secret');
  return err.message;
}

describe('ImageGuard: where a path really leads', () => {
  const plain = { [at('base.qcow2')]: qcow2() };

  it.each<[string, ImagePaths, RegExp]>([
    ['a link to a host file', { boot: { kernel: at('shadow') } }, /"boot\.kernel": it resolves to a path outside the image directories/],
    ['a path through a linked folder', { boot: { kernel: at('vmlinuz'), initrd: at('rootdir', 'shadow') } }, /"boot\.initrd": it resolves to a path outside/],
    ['a disk image linked outside', disk(at('shadow')), /"disks\[0\]\.image": it resolves to a path outside/],
    ['a FIFO', disk(at('fifo')), /"disks\[0\]\.image": it is a FIFO, not a regular file/],
    ['a folder', { boot: { kernel: at('folder') } }, /"boot\.kernel": it is a directory, not a regular file/],
    ['a device reached through a link', { boot: { kernel: '/dev/null' } }, /"boot\.kernel": it resolves to a path outside/],
    ['a missing file', disk(at('missing.qcow2')), /"disks\[0\]\.image": it cannot be resolved \(ENOENT\)/],
  ])('refuses %s, naming the field', async (_what, spec, expected) => {
    const { guard, inspected } = guardWith(plain);
    expect(await refusal(guard.checkSpec(spec))).toMatch(expected);
    expect(inspected).toEqual([]); // refused before qemu-img ever opened it
  });

  it('refuses a device even inside an image directory', async () => {
    const { guard } = guardWith(plain, { dirs: [images, '/dev'] });
    expect(await refusal(guard.checkSpec({ boot: { kernel: '/dev/null' } }))).toMatch(/it is a device, not a regular file/);
  });

  it('accepts links that stay inside, and image directories that are links themselves', async () => {
    const { guard, inspected } = guardWith(plain, { dirs: [path.join(root, 'images-link')] });
    await guard.checkSpec({ boot: { kernel: at('current-kernel'), initrd: at('initrd.img') }, disks: [{ name: 'root', image: at('base.qcow2') }] });
    expect(inspected).toEqual([at('base.qcow2')]);
  });

  it('refuses everything when no image directory exists', async () => {
    const { guard } = guardWith(plain, { dirs: [path.join(root, 'nowhere')] });
    expect(await refusal(guard.checkSpec(disk(at('base.qcow2'))))).toMatch(/outside the image directories/);
  });
});

describe('ImageGuard: the backing chain', () => {
  it('walks a chain inside the image directories, one member at a time', async () => {
    const { guard, inspected } = guardWith({
      [at('top.qcow2')]: qcow2('mid.qcow2'),
      [at('mid.qcow2')]: qcow2(at('base.qcow2'), { backingFormat: 'raw' }),
      [at('base.qcow2')]: { format: 'raw' },
    });
    await guard.checkSpec(disk(at('top.qcow2')));
    expect(inspected).toEqual([at('top.qcow2'), at('mid.qcow2'), at('base.qcow2')]);
  });

  it.each<[string, ImageInfo, RegExp]>([
    ['a host file', qcow2(path.join(root, 'outside', 'shadow'), { backingFormat: 'raw' }), /backing file 1 resolves to a path outside/],
    ['a link to a host file', qcow2('shadow'), /backing file 1 resolves to a path outside/],
    ['a FIFO', qcow2(at('fifo')), /backing file 1 is a FIFO/],
    ['json:', qcow2('json:{"file":{"driver":"file","filename":"/etc/shadow"}}'), /backing file 1 is not a plain file path/],
    ['nbd:', qcow2('nbd://127.0.0.1:10809/export'), /backing file 1 is not a plain file path/],
    ['http:', qcow2('http://example.org/disk.img'), /backing file 1 is not a plain file path/],
    ['a forbidden backing format', qcow2(at('base.qcow2'), { backingFormat: 'vvfat' }), /backing file 1 has a format that is not allowed/],
    ['an external data file', qcow2(undefined, { dataFile: '/etc/shadow' }), /the image uses an external data file/],
    ['a forbidden format of its own', { format: 'vmdk' }, /the image has a format that is not allowed/],
  ])('refuses an image whose chain reaches %s', async (_what, top, expected) => {
    const { guard, inspected } = guardWith({ [at('top.qcow2')]: top, [at('base.qcow2')]: qcow2() });
    expect(await refusal(guard.checkSpec(disk(at('top.qcow2'))))).toMatch(expected);
    expect(inspected).toEqual([at('top.qcow2')]);
  });

  it('refuses a chain that loops', async () => {
    const { guard } = guardWith({ [at('top.qcow2')]: qcow2('mid.qcow2'), [at('mid.qcow2')]: qcow2('top.qcow2') });
    expect(await refusal(guard.checkSpec(disk(at('top.qcow2'))))).toMatch(/backing file 2 makes the chain loop/);
  });

  it('refuses a chain longer than the bound', async () => {
    const { guard, inspected } = guardWith(
      { [at('top.qcow2')]: qcow2('mid.qcow2'), [at('mid.qcow2')]: qcow2('base.qcow2'), [at('base.qcow2')]: qcow2() },
      { maxChainDepth: 2 },
    );
    expect(await refusal(guard.checkSpec(disk(at('top.qcow2'))))).toMatch(/backing chain is longer than 2 images/);
    expect(inspected).toHaveLength(2);
  });

  it('refuses a file qemu-img cannot read, without quoting it', async () => {
    const { guard } = guardWith({});
    expect(await refusal(guard.checkSpec({ disks: [{ name: 'a', sizeGiB: 1 }, { name: 'b', image: at('vmlinuz') }] }))).toMatch(
      /"disks\[1\]\.image": the image is not a readable disk image$/,
    );
  });
});

describe('qemuImgInspector', () => {
  it('asks qemu-img about one file without its backing chain, stating a known format', async () => {
    const calls: string[][] = [];
    const runner = {
      run: async (args: readonly string[]) => {
        calls.push([...args]);
        return JSON.stringify({
          format: 'qcow2',
          'backing-filename': 'base.qcow2',
          'full-backing-filename': '/images/base.qcow2',
          'backing-filename-format': 'raw',
          'format-specific': { type: 'qcow2', data: { 'data-file': '/dev/sda' } },
        });
      },
    } as unknown as QemuImg;
    const info = await qemuImgInspector(runner)('/images/top.qcow2', 'qcow2');
    expect(calls).toEqual([['info', '--output=json', '-U', '-f', 'qcow2', '/images/top.qcow2']]);
    expect(info).toEqual({
      format: 'qcow2',
      backingFilename: 'base.qcow2',
      fullBackingFilename: '/images/base.qcow2',
      backingFormat: 'raw',
      dataFile: '/dev/sda',
    });
  });
});
