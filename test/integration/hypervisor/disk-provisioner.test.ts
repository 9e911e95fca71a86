import { execFile } from 'node:child_process';
import { mkdtemp, readdir, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { QemuImgDiskProvisioner } from '../../../src/hypervisor/disk-provisioner.js';

const run = promisify(execFile);

async function info(file: string): Promise<Record<string, unknown>> {
  const { stdout } = await run('qemu-img', ['info', '--force-share', '--output=json', file]);
  return JSON.parse(stdout) as Record<string, unknown>;
}

describe('QemuImgDiskProvisioner (real qemu-img)', () => {
  let dir: string;
  const disks = new QemuImgDiskProvisioner({ timeoutMs: 30_000 });

  beforeEach(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'vmkeeper-disks-'));
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it.each(['qcow2', 'raw'])('creates an overlay backed by a %s image, stating its format', async (format) => {
    const base = path.join(dir, 'images', `base.${format}`);
    await run('sh', ['-c', `mkdir -p "${path.dirname(base)}" && qemu-img create -q -f ${format} "${base}" 64M`]);
    const file = path.join(dir, 'guests', 'web-1', 'disk-root.qcow2');
    await disks.createDisk(file, { backingImage: base });
    const overlay = await info(file);
    expect(overlay.format).toBe('qcow2');
    expect(overlay['backing-filename']).toBe(base);
    expect(overlay['backing-filename-format']).toBe(format);
    expect(overlay['virtual-size']).toBe(64 * 1024 * 1024);
    expect((await stat(path.dirname(file))).mode & 0o777).toBe(0o711);
    expect(await readdir(path.dirname(file))).toEqual(['disk-root.qcow2']); // no temp file left
  });

  it('creates an empty disk of the given virtual size', async () => {
    const file = path.join(dir, 'guests', 'db', 'disk-data.qcow2');
    await disks.createDisk(file, { sizeGiB: 2 });
    const disk = await info(file);
    expect(disk.format).toBe('qcow2');
    expect(disk['virtual-size']).toBe(2 * 1024 ** 3);
    expect(disk['backing-filename']).toBeUndefined();
  });

  it('keeps an existing file (idempotent retry)', async () => {
    const file = path.join(dir, 'disk.qcow2');
    await writeFile(file, 'not touched');
    await disks.createDisk(file, { sizeGiB: 1 });
    expect((await stat(file)).size).toBe('not touched'.length);
  });

  it('fails with qemu-img\'s message and leaves nothing behind when the image is missing', async () => {
    const file = path.join(dir, 'guests', 'x', 'disk-root.qcow2');
    await expect(disks.createDisk(file, { backingImage: path.join(dir, 'nope.qcow2') })).rejects.toThrow(/qemu-img info failed: .*nope\.qcow2/);
    await expect(stat(file)).rejects.toThrow();
  });

  it('ensureDir creates a 0711 folder qemu can traverse; removePath removes trees and tolerates missing paths', async () => {
    const machineDir = path.join(dir, 'guests', 'gone');
    await disks.ensureDir(machineDir);
    await disks.ensureDir(machineDir);
    expect((await stat(machineDir)).mode & 0o777).toBe(0o711);
    await disks.createDisk(path.join(machineDir, 'disk.qcow2'), { sizeGiB: 1 });
    await disks.removePath(machineDir);
    await expect(stat(machineDir)).rejects.toThrow();
    await expect(disks.removePath(machineDir)).resolves.toBeUndefined();
  });

  it('kills a qemu-img that runs past the timeout', async () => {
    const slow = path.join(dir, 'slow-qemu-img');
    await writeFile(slow, '#!/bin/sh\nexec sleep 10\n', { mode: 0o755 });
    const stuck = new QemuImgDiskProvisioner({ qemuImg: slow, timeoutMs: 200 });
    await expect(stuck.createDisk(path.join(dir, 'd.qcow2'), { sizeGiB: 1 })).rejects.toThrow(/timed out after 200 ms/);
  });
});
