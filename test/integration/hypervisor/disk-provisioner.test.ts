import { execFile } from 'node:child_process';
import { lstat, mkdir, mkdtemp, readdir, readFile, rm, stat, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { QemuImgDiskProvisioner } from '../../../src/hypervisor/disk-provisioner.js';
import type { Logger } from '../../../src/logging/logger.js';

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

  it('fails with a summary of qemu-img\'s message and leaves nothing behind when the image is missing', async () => {
    const file = path.join(dir, 'guests', 'x', 'disk-root.qcow2');
    await expect(disks.createDisk(file, { backingImage: path.join(dir, 'nope.qcow2') })).rejects.toThrow(
      /^qemu-img info failed \(exit 1\): (Could not open|No such file or directory)$/,
    );
    await expect(stat(file)).rejects.toThrow();
  });

  it('shows qemu-img\'s failure without what it quoted; the raw stderr goes to the debug log, capped', async () => {
    const logged: Array<{ message: string; fields?: Record<string, unknown> }> = [];
    const debug: Logger['debug'] = (message, fields) => void logged.push({ message, fields });
    const logging = new QemuImgDiskProvisioner({ timeoutMs: 30_000, logger: { error() {}, warn() {}, info() {}, debug } });
    // The base names a backing file qemu-img quotes when it cannot open it.
    const base = path.join(dir, 'images', 'base.qcow2');
    await mkdir(path.dirname(base));
    await run('qemu-img', ['create', '-q', '-f', 'qcow2', '-u', '-b', path.join(dir, 'SECRET-words'), '-F', 'raw', base, '64M']);
    const failure = logging.createDisk(path.join(dir, 'guests', 'w', 'disk-root.qcow2'), { backingImage: base });
    await expect(failure).rejects.toThrow(/^qemu-img create failed \(exit 1\): Could not open backing file$/);
    const stderr = logged.find((l) => l.message === 'qemu-img create failed')?.fields?.stderr as string;
    expect(stderr).toContain('SECRET-words');
    expect(stderr.length).toBeLessThanOrEqual(2048);
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
    await expect(stuck.createDisk(path.join(dir, 'guests', 'd', 'd.qcow2'), { sizeGiB: 1 })).rejects.toThrow(/timed out after 200 ms/);
  });
});

// The state dir is root's, but backups, restores and hand edits happen: links planted in it are
// never followed, written through, chmodded through, or deleted through.
describe('QemuImgDiskProvisioner: saved-state files', () => {
  let dir: string;
  const disks = new QemuImgDiskProvisioner({ timeoutMs: 30_000 });

  beforeEach(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'vmkeeper-saved-'));
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('fileExists tells a regular file from a missing one or a folder; renameFile moves it, replacing the old one', async () => {
    const saved = path.join(dir, 'saved-state');
    expect(await disks.fileExists(saved)).toBe(false);
    expect(await disks.fileExists(dir)).toBe(false);
    await writeFile(saved, 'memory, newer');
    await writeFile(`${saved}.failed`, 'memory, older');
    expect(await disks.fileExists(saved)).toBe(true);
    await disks.renameFile(saved, `${saved}.failed`);
    expect(await disks.fileExists(saved)).toBe(false);
    expect(await readFile(`${saved}.failed`, 'utf8')).toBe('memory, newer');
  });
});

describe('QemuImgDiskProvisioner with links planted in the state dir', () => {
  let dir: string;
  let outside: string;
  let guests: string;
  const disks = new QemuImgDiskProvisioner({ timeoutMs: 30_000 });
  const victim = () => path.join(outside, 'victim');
  const untouched = async () => {
    expect(await readFile(victim(), 'utf8')).toBe('host file');
    expect((await stat(victim())).mode & 0o777).toBe(0o640);
    expect((await stat(outside)).mode & 0o777).toBe(0o750);
  };

  beforeEach(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'vmkeeper-links-'));
    outside = path.join(dir, 'outside');
    guests = path.join(dir, 'state', 'guests');
    await mkdir(outside, { mode: 0o750 });
    await writeFile(victim(), 'host file', { mode: 0o640 });
    await mkdir(path.join(dir, 'state'));
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('refuses a guests/ folder that is a link, writing nothing through it', async () => {
    await symlink(outside, guests);
    await expect(disks.createDisk(path.join(guests, 'web', 'disk-root.qcow2'), { sizeGiB: 1 })).rejects.toThrow(/guests: it is a symbolic link/);
    await expect(disks.ensureDir(path.join(guests, 'web'))).rejects.toThrow(/symbolic link/);
    expect(await readdir(outside)).toEqual(['victim']);
    await untouched();
  });

  it('refuses a machine folder that is a link', async () => {
    await mkdir(guests);
    await symlink(outside, path.join(guests, 'web'));
    await expect(disks.ensureDir(path.join(guests, 'web'))).rejects.toThrow(/web: it is a symbolic link/);
    await expect(disks.createDisk(path.join(guests, 'web', 'disk-root.qcow2'), { sizeGiB: 1 })).rejects.toThrow(/symbolic link/);
    expect(await readdir(outside)).toEqual(['victim']);
    await untouched();
  });

  it('refuses a disk path that is a link instead of keeping it as "already there"', async () => {
    await mkdir(path.join(guests, 'web'), { recursive: true });
    const disk = path.join(guests, 'web', 'disk-root.qcow2');
    await symlink(victim(), disk);
    await expect(disks.createDisk(disk, { sizeGiB: 1 })).rejects.toThrow(/disk-root\.qcow2: it exists and is not a regular file/);
    await untouched();
  });

  // serial.log: libvirt would write through it; the temp name: qemu-img would.
  it.each(['serial.log', `disk-root.qcow2.tmp-${process.pid}`])('refuses a machine folder holding a link planted at %s', async (name) => {
    await mkdir(path.join(guests, 'web'), { recursive: true });
    await symlink(victim(), path.join(guests, 'web', name));
    await expect(disks.ensureDir(path.join(guests, 'web'))).rejects.toThrow(/: the agent made no such entry \(not a regular file\)$/);
    await expect(disks.createDisk(path.join(guests, 'web', 'disk-root.qcow2'), { sizeGiB: 1 })).rejects.toThrow(/the agent made no such entry/);
    await untouched();
  });

  it('deleting a machine whose folder is a link removes the link, not its target', async () => {
    await mkdir(guests);
    await symlink(outside, path.join(guests, 'web'));
    await disks.removePath(path.join(guests, 'web'));
    expect(await readdir(guests)).toEqual([]);
    await untouched();
  });

  it('deleting a machine unlinks links inside its folder and keeps their targets', async () => {
    const machine = path.join(guests, 'web');
    await disks.ensureDir(machine);
    await symlink(outside, path.join(machine, 'serial.log'));
    await symlink(victim(), path.join(machine, 'disk-root.qcow2'));
    await disks.removePath(machine);
    await expect(lstat(machine)).rejects.toThrow(/ENOENT/);
    await untouched();
  });

  it('a saved-state path that is a link is no saved state, and is never renamed through', async () => {
    const machine = path.join(guests, 'web');
    await disks.ensureDir(machine);
    const saved = path.join(machine, 'saved-state');
    await symlink(victim(), saved);
    expect(await disks.fileExists(saved)).toBe(false);
    await expect(disks.renameFile(saved, `${saved}.failed`)).rejects.toThrow(/saved-state: it is not a regular file/);
    await untouched();
  });

  it('refuses to rename under a machine folder that is a link, or out of its folder', async () => {
    await mkdir(guests);
    await symlink(outside, path.join(guests, 'web'));
    await expect(disks.renameFile(path.join(guests, 'web', 'victim'), path.join(guests, 'web', 'victim.failed'))).rejects.toThrow(/web: it is not a real directory/);
    await expect(disks.renameFile(path.join(guests, 'a', 'saved-state'), path.join(guests, 'b', 'saved-state'))).rejects.toThrow(/must stay inside its folder/);
    await untouched();
  });

  it('refuses to delete under a guests/ folder that is a link', async () => {
    await symlink(outside, guests);
    await expect(disks.removePath(path.join(guests, 'victim'))).rejects.toThrow(/guests: it is not a real directory/);
    await untouched();
  });
});
