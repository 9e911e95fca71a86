import type { MessageBus } from 'dbus-next';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeMachines } from '../../../bench/fixtures.js';
import { plainSocketAddress } from '../../../src/dbus/bus-address.js';
import type { AgentProcess } from '../../support/agent-process.js';
import { busctlCall } from '../../support/busctl.js';
import type { PrivateBus } from '../../support/dbus-daemon.js';
import { listMachines, manager, rawCall, startRig, type Rig } from './helpers.js';

// Regression: with the optional usocket addon installed, dbus-next sent every unix:path= message
// through it, and messages over ~256 KB stalled or failed (EBADF/ECONNRESET): an agent with a few
// thousand machines could not answer ListMachines, and its bus connection was dead from then on.
// src/dbus/bus-address.ts now connects through Node's net.Socket.

const COUNT = 4000; // ListMachines ~350 KB, GetManagedObjects several MB

describe('large D-Bus messages', () => {
  let rig: Rig;
  let bus: PrivateBus;
  let agent: AgentProcess;
  let client: MessageBus;

  beforeAll(async () => {
    rig = await startRig({
      prefix: 'vmk-large-',
      prepare: async (dir) => {
        const { stateDir, imageDir, uri } = await writeMachines(dir, COUNT);
        return { stateDir, imageDir, libvirtUri: uri, extraArgs: ['--log-level', 'info'] };
      },
    });
    ({ bus, client } = rig);
    agent = rig.agent!;
  }, 120_000);

  afterAll(() => rig?.stop());

  it('rewrites unix addresses to the plain-socket form', () => {
    expect(plainSocketAddress('unix:path=/run/bus,guid=ab')).toBe('unix:socket=/run/bus,guid=ab');
    expect(plainSocketAddress('unix:abstract=/tmp/x;tcp:host=h,port=1')).toBe('unix:socket=\u0000/tmp/x;tcp:host=h,port=1');
    expect(plainSocketAddress('tcp:host=localhost,port=5')).toBe('tcp:host=localhost,port=5');
  });

  it(`answers ListMachines and GetManagedObjects with ${COUNT} machines, and keeps answering`, async () => {
    expect((await listMachines(client, 30_000)).length).toBe(COUNT);
    const objects = await rawCall(client, { path: '/org/vmkeeper1', iface: 'org.freedesktop.DBus.ObjectManager', member: 'GetManagedObjects' }, 30_000);
    expect(objects.ok && Object.keys(objects.body[0] as object).length).toBe(COUNT);
    // A client that is not dbus-next (libsystemd's busctl) gets the same.
    const viaBusctl = await busctlCall(bus.address, '/org/vmkeeper1', 'org.vmkeeper1.Manager', 'ListMachines');
    expect((viaBusctl.data as unknown[][])[0]!.length).toBe(COUNT);
    expect((await manager(client, 'GetMachine', 's', ['vm-00042'])).ok).toBe(true);
    expect(agent.output()).not.toMatch(/D-Bus connection error/);
  }, 90_000);

  it('takes a 1 MB request and answers it with a named error', async () => {
    const r = await manager(client, 'SetMachineAnnotations', 'sa{ss}', ['vm-00001', { big: 'x'.repeat(1_000_000) }], 30_000);
    // Over the 128 KiB body limit: refused from its header, before decoding (docs/dbus-api.md, Limits).
    expect(r.ok ? 'ok' : r.errorName).toBe('org.freedesktop.DBus.Error.LimitsExceeded');
    expect((await manager(client, 'GetMachine', 's', ['vm-00001'])).ok).toBe(true);
  }, 60_000);
});
