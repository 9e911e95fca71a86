import type { MessageBus } from 'dbus-next';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectBus } from '../../../src/dbus/bus-address.js';
import { DBusService } from '../../../src/dbus/dbus-service.js';
import { silentLogger } from '../../../src/logging/logger.js';
import { busctlCall } from '../../support/busctl.js';
import { startSessionBus, type PrivateBus } from '../../support/dbus-daemon.js';
import { Harness as AgentCore, SPEC } from '../../support/agent-harness.js';
import { waitFor } from '../../support/wait.js';

// The caller's uid comes from the bus daemon for the message's sender, is cached per unique name,
// and is forgotten once that name leaves the bus (each busctl run is a connection of its own).

const MANAGER = ['/org/vmkeeper1', 'org.vmkeeper1.Manager'] as const;

describe('caller identity on a private bus', () => {
  let daemon: PrivateBus;
  let conn: MessageBus;
  let core: AgentCore;
  let service: DBusService;

  beforeAll(async () => {
    daemon = await startSessionBus();
    conn = await connectBus(daemon.address);
    core = await new AgentCore({ config: (c) => (c.libvirt.uri = 'test:///default') }).start();
    service = new DBusService({ bus: conn, api: core.service, logger: silentLogger });
    await service.start();
  });
  afterAll(async () => {
    await service?.stop();
    await core?.agent.stop();
    conn?.disconnect();
    await daemon?.stop();
  });

  it('records the uid the bus reports and the member, and forgets a sender once it leaves', async () => {
    await busctlCall(daemon.address, ...MANAGER, 'CreateMachine', 'ss', ['who-1', SPEC]);
    await busctlCall(daemon.address, ...MANAGER, 'SetMachineAnnotationsIfVersion', 'sa{ss}t', ['who-1', 1, 'k', 'v', 0]);
    const events = core.service.eventsSince(0, 'who-1', 100).events;
    const uid = process.getuid!();
    expect(events.find((e) => e.reason === 'Created')?.actor).toEqual({ uid, call: 'CreateMachine' });
    expect(events.find((e) => e.reason === 'AnnotationsChanged')?.actor).toEqual({ uid, call: 'SetMachineAnnotationsIfVersion' });
    // Both busctl connections have closed: NameOwnerChanged empties the cache.
    await waitFor(() => service.callers.cachedSenders === 0, { timeoutMs: 10_000, what: 'the sender cache to empty' });
  });
});
