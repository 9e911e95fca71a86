import { execFileSync } from 'node:child_process';
import { closeSync, openSync, writeSync } from 'node:fs';
import { mkdir, readdir, readFile, rm } from 'node:fs/promises';
import path from 'node:path';
import type { MessageBus } from 'dbus-next';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawnAgent, type AgentProcess } from '../../support/agent-process.js';
import { startSessionBus } from '../../support/dbus-daemon.js';
import { waitFor } from '../../support/wait.js';
import { closeClient, isRoot, listMachines, machineProp, manager, openClient, startRig, type Rig } from './helpers.js';

// Fault injection without libvirtd (libvirt's test driver): the state directory running out of
// space (a small tmpfs as stateDir), and the D-Bus daemon going away under the agent.

const SPEC = JSON.stringify({ cpus: 1, memoryMiB: 64, disks: [{ name: 'root', sizeGiB: 1 }], power: 'off' });

/** Fills the filesystem holding `file` until ENOSPC. */
function fill(file: string): void {
  const fd = openSync(file, 'w');
  const chunk = Buffer.alloc(64 * 1024);
  try {
    for (;;) {
      try {
        writeSync(fd, chunk);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOSPC') throw err;
        // Small remainders too, so not even a 100-byte write fits.
        try {
          for (;;) writeSync(fd, Buffer.alloc(64));
        } catch {
          return;
        }
      }
    }
  } finally {
    closeSync(fd);
  }
}

describe.skipIf(!isRoot)('fault injection: the state directory is full', () => {
  let rig: Rig;
  let stateDir: string;
  let client: MessageBus;
  let agent: AgentProcess;
  let mounted = false;

  beforeAll(async () => {
    rig = await startRig({
      prefix: 'vmk-full-',
      config: { pollIntervalMs: 200 },
      prepare: async (dir) => {
        stateDir = path.join(dir, 'state');
        await mkdir(stateDir);
        execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=4m,mode=0700', 'vmkeeper-test-full', stateDir]);
        mounted = true;
      },
      cleanup: () => {
        if (mounted) execFileSync('umount', ['-l', stateDir]);
      },
    });
    client = rig.client;
    agent = rig.agent!;
  }, 60_000);

  afterAll(() => rig?.stop());

  it('answers StorageFailure, writes nothing half-way, and serves normally once space returns', async () => {
    let r = await manager(client, 'CreateMachine', 'ss', ['keep', SPEC]);
    expect(r.ok).toBe(true);
    await waitFor(async () => (await machineProp(client, 'keep', 'State')) === 'stopped', { timeoutMs: 20_000, what: 'keep stopped' });
    const keepFile = path.join(stateDir, 'machines', 'keep.json');
    const before = await readFile(keepFile, 'utf8');
    const filler = path.join(stateDir, 'filler');
    fill(filler);

    r = await manager(client, 'CreateMachine', 'ss', ['full-1', SPEC]);
    expect(r.ok ? 'ok' : r.errorName).toBe('org.vmkeeper1.Error.StorageFailure');
    expect(r.ok ? '' : r.message).toMatch(/ENOSPC/);
    r = await manager(client, 'GetMachine', 's', ['full-1']);
    expect(r.ok ? 'ok' : r.errorName).toBe('org.vmkeeper1.Error.NoSuchMachine');
    r = await manager(client, 'SetMachineAnnotations', 'sa{ss}', ['keep', { owner: 'x'.repeat(2000) }]);
    expect(r.ok ? 'ok' : r.errorName).toBe('org.vmkeeper1.Error.StorageFailure');
    r = await manager(client, 'DeleteMachine', 's', ['keep']);
    expect(r.ok ? 'ok' : r.errorName).toBe('org.vmkeeper1.Error.StorageFailure');
    r = await manager(client, 'SetMachinePower', 'ss', ['keep', 'on']);
    expect(r.ok ? 'ok' : r.errorName).toBe('org.vmkeeper1.Error.StorageFailure');

    // Nothing half-written: the old record byte for byte, no temp files, and the bus agrees.
    expect(await readFile(keepFile, 'utf8')).toBe(before);
    expect(await readdir(path.join(stateDir, 'machines'))).toEqual(['keep.json']);
    expect(await machineProp(client, 'keep', 'Annotations')).toEqual({});
    expect(await machineProp(client, 'keep', 'Power')).toBe('off');
    expect(await machineProp(client, 'keep', 'DeletionTimestamp')).toBe(0n);
    expect((await listMachines(client)).map((m) => m[0])).toEqual(['keep']);
    expect(agent.child.exitCode).toBeNull();

    await rm(filler);
    r = await manager(client, 'CreateMachine', 'ss', ['full-1', SPEC]);
    expect(r.ok ? 'ok' : `${r.errorName}: ${r.message}`).toBe('ok');
    r = await manager(client, 'SetMachineAnnotations', 'sa{ss}', ['keep', { owner: 'after' }]);
    expect(r.ok).toBe(true);
    await waitFor(async () => (await machineProp(client, 'full-1', 'State')) === 'stopped', { timeoutMs: 20_000, what: 'full-1 stopped' });
    expect(await machineProp(client, 'keep', 'Annotations')).toEqual({ owner: 'after' });
    r = await manager(client, 'DeleteMachineWithGracePeriod', 'su', ['keep', 0]);
    expect(r.ok).toBe(true);
    await waitFor(async () => !(await listMachines(client)).some((m) => m[0] === 'keep'), { timeoutMs: 20_000, what: 'keep deleted' });
    // Record files trail the journal by up to the store's file lag (100 ms).
    await waitFor(async () => (await readdir(path.join(stateDir, 'machines'))).join() === 'full-1.json', { timeoutMs: 5000, what: 'only full-1.json left' });
  }, 90_000);
});

describe('fault injection: the D-Bus daemon restarts', () => {
  const call = async () => {
    const client = await openClient(rig.bus.address);
    try {
      return (await manager(client, 'ListMachines', '', [], 5000)).ok;
    } finally {
      closeClient(client);
    }
  };
  let rig: Rig;

  beforeAll(async () => {
    rig = await startRig({ prefix: 'vmk-busr-' });
  });

  afterAll(() => rig?.stop());

  // Without its bus the agent cannot serve: it logs why and exits non-zero, so systemd's
  // Restart=on-failure starts a fresh agent that owns the name on the new bus.
  it('exits non-zero when the bus daemon goes away, and a restarted agent serves on the new bus', async () => {
    let agent = rig.agent!;
    expect(await call()).toBe(true); // a live call first: the connection is really in use
    await rig.bus.stop();
    const exited = await Promise.race([
      agent.exited,
      new Promise<'still running'>((resolve) => setTimeout(() => resolve('still running'), 20_000)),
    ]);
    expect(exited).toEqual({ code: 1, signal: null });
    expect(agent.output()).toMatch(/lost the D-Bus connection/);
    rig.bus = await startSessionBus();
    // What systemd does after the non-zero exit (here the new bus has a new address).
    agent = rig.agent = spawnAgent({ ...rig.opts, busAddress: rig.bus.address });
    await agent.ready();
    expect(await call()).toBe(true);
  }, 60_000);
});
