import { Message, MessageType, sessionBus, Variant, type MessageBus } from 'dbus-next';
import { mkdtemp, rm, symlink } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SystemBusHostPlatform } from '../../../src/hostshutdown/host-platform.js';
import { silentLogger } from '../../../src/logging/logger.js';
import { startSessionBus, type PrivateBus } from '../../support/dbus-daemon.js';

// The real platform reads logind's InhibitDelayMaxUSec over D-Bus: a stand-in logind on a private
// bus answers Properties.Get the way logind does (a "t" in a variant), so the bigint dbus-next
// hands back is checked for real.

let bus: PrivateBus;
let logind: MessageBus;
let served: bigint | undefined;

beforeAll(async () => {
  bus = await startSessionBus();
  logind = sessionBus({ busAddress: bus.address });
  await logind.requestName('org.freedesktop.login1', 0);
  logind.addMethodHandler((msg: Message) => {
    if (msg.type !== MessageType.METHOD_CALL || msg.path !== '/org/freedesktop/login1' || msg.interface !== 'org.freedesktop.DBus.Properties' || msg.member !== 'Get') return false;
    const [iface, name] = msg.body as [string, string];
    if (iface !== 'org.freedesktop.login1.Manager' || name !== 'InhibitDelayMaxUSec' || served === undefined) {
      // dbus-next's types say string; it takes the call being answered.
      logind.send(Message.newError(msg as unknown as string, 'org.freedesktop.DBus.Error.UnknownProperty', `no ${iface}.${name}`));
    } else {
      logind.send(Message.newMethodReturn(msg, 'v', [new Variant('t', served)]));
    }
    return true;
  });
});

afterAll(async () => {
  logind?.disconnect();
  await bus?.stop();
});

describe('logind InhibitDelayMaxUSec', () => {
  it.each([5_000_000n, 180_000_000n])('reads %s µs from logind', async (usec) => {
    served = usec;
    const platform = new SystemBusHostPlatform({ logger: silentLogger, busAddress: bus.address });
    try {
      expect(await platform.inhibitDelayMaxUSec()).toBe(Number(usec));
    } finally {
      platform.close();
    }
  });

  it('a logind without the property is an error the handler can log', async () => {
    served = undefined;
    const platform = new SystemBusHostPlatform({ logger: silentLogger, busAddress: bus.address });
    try {
      await expect(platform.inhibitDelayMaxUSec()).rejects.toThrow(/InhibitDelayMaxUSec/);
    } finally {
      platform.close();
    }
  });
});

describe('no system bus', () => {
  // A container or a host without dbus-daemon: the start-up asks logind four things before READY,
  // and each must fail when the connection does, not after its call timeout (here far beyond the
  // test's own). dbus-next alone leaves a call on a failed connection unanswered forever.
  it('calls fail as soon as the connection does, and the next call connects again', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'vmk-no-system-bus-'));
    const socket = path.join(dir, 'system_bus_socket');
    const platform = new SystemBusHostPlatform({ logger: silentLogger, busAddress: `unix:path=${socket}`, callTimeoutMs: 600_000 });
    try {
      await expect(platform.systemState()).rejects.toThrow(/cannot connect to the system bus: .*ENOENT/);
      await expect(platform.inhibitDelayMaxUSec()).rejects.toThrow(/cannot connect to the system bus/);
      // The bus appears (here: the stand-in's socket behind that path): the next call reaches it.
      await symlink(/path=([^,;]+)/.exec(bus.address)![1]!, socket);
      served = 7_000_000n;
      expect(await platform.inhibitDelayMaxUSec()).toBe(7_000_000);
    } finally {
      platform.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
