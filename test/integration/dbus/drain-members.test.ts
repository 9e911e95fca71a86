import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { MessageBus } from 'dbus-next';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectBus } from '../../../src/dbus/bus-address.js';
import { DBusService } from '../../../src/dbus/dbus-service.js';
import { DrainController } from '../../../src/drain/drain-controller.js';
import { DrainStateFile } from '../../../src/drain/drain-state-file.js';
import { hostApi } from '../../../src/drain/host-api.js';
import type { ShutdownRecord, ShutdownRecordReader } from '../../../src/hostshutdown/stop-procedure.js';
import { silentLogger } from '../../../src/logging/logger.js';
import { drainStateFile } from '../../../src/machine/paths.js';
import { Harness as AgentCore } from '../../support/agent-harness.js';
import { busctlCall, busctlGetProperty, dbusSend } from '../../support/busctl.js';
import { startSessionBus, type PrivateBus } from '../../support/dbus-daemon.js';
import { SignalRecorder, changedProperties } from '../../support/signals.js';
import { waitFor } from '../../support/wait.js';
import { FakeStopProcedure, machineResult } from '../../support/fakes/fake-stop-procedure.js';

// The drain and shutdown-record members at the D-Bus edge: a private dbus-daemon, the real agent
// core on the fake hypervisor, the real drain controller, and a stop procedure the test finishes
// by hand (the procedure itself is tested on its own).

const ROOT = '/org/vmkeeper1';
const MANAGER = 'org.vmkeeper1.Manager';
const T0 = 1_767_225_600_123;

const RECORD: ShutdownRecord = {
  id: '20261205T080102Z-1',
  kind: 'host-shutdown',
  result: 'completed',
  startedAt: T0,
  finishedAt: T0 + 12_345,
  boundSec: 120,
  groups: [{ minPriority: 0, budgetSec: 120, startedAt: T0, finishedAt: T0 + 12_345 }],
  machines: [{ ...machineResult('web', 'saved'), afterMs: 12_000 }],
};

describe('Drain, Undrain, DrainState and the shutdown records on the bus', () => {
  let daemon: PrivateBus;
  let conn: MessageBus;
  let core: AgentCore;
  let service: DBusService;
  let signals: SignalRecorder;
  let dir: string;
  const stop = new FakeStopProcedure();
  const kept: ShutdownRecord[] = [RECORD];
  const reader: ShutdownRecordReader = { list: () => kept, get: (id) => kept.find((r) => r.id === id) };
  const call = (member: string, sig = '', args: (string | number)[] = []) => busctlCall(daemon.address, ROOT, MANAGER, member, sig, args);
  const drainState = async () => (await busctlGetProperty(daemon.address, ROOT, MANAGER, 'DrainState')).data;
  const hostEvents = async () =>
    ((await call('ListEventsSince', 'ts', [0, ''])).data as [Array<[number, number, string, string, string, string, string, string]>])[0]
      .filter((e) => e[2] === '')
      .map((e) => ({ reason: e[4], uid: e[6], call: e[7] }));

  beforeAll(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'vmk-drain-dbus-'));
    daemon = await startSessionBus();
    conn = await connectBus(daemon.address);
    core = await new AgentCore({ behaviour: 'obey', clockStartMs: T0, config: (c) => (c.stateDir = dir) }).start();
    const agent = core.agent;
    const drain = new DrainController({
      file: new DrainStateFile(drainStateFile(dir)),
      gate: agent.startGate,
      stopProcedure: stop,
      events: { record: (type, reason, message, actor) => agent.records.event('', type, reason, message, actor), flushed: () => agent.journal.flushed() },
      agent: agent.service,
      clock: core.clock,
      logger: silentLogger,
    });
    await drain.restore();
    service = new DBusService({ bus: conn, api: agent.service, logger: silentLogger, host: hostApi(drain, reader) });
    await service.start();
    signals = await SignalRecorder.open(daemon.address);
  });

  afterAll(async () => {
    signals?.close();
    await service?.stop();
    await core?.agent.stop();
    conn?.disconnect();
    await daemon?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  it('ListShutdownRecords answers a(ssstt) with usec times, DescribeShutdownRecord the record as JSON', async () => {
    expect(await call('ListShutdownRecords')).toEqual({
      type: 'a(ssstt)',
      data: [[[RECORD.id, 'host-shutdown', 'completed', T0 * 1000, (T0 + 12_345) * 1000]]],
    });
    const [json] = (await call('DescribeShutdownRecord', 's', [RECORD.id])).data as [string];
    expect(JSON.parse(json)).toEqual(RECORD);
  });

  it('an unknown record id is NoSuchShutdownRecord naming it; a wrong signature is InvalidArgs', async () => {
    const missing = await dbusSend(daemon.address, ROOT, `${MANAGER}.DescribeShutdownRecord`, ['string:nope-1']);
    expect(missing.errorName).toBe('org.vmkeeper1.Error.NoSuchShutdownRecord');
    expect(missing.message).toContain('"nope-1"');
    const wrong = await dbusSend(daemon.address, ROOT, `${MANAGER}.DescribeShutdownRecord`, ['uint32:1']);
    expect(wrong.errorName).toBe('org.freedesktop.DBus.Error.InvalidArgs');
    const drainWithArgs = await dbusSend(daemon.address, ROOT, `${MANAGER}.Drain`, ['string:now']);
    expect(drainWithArgs.errorName).toBe('org.freedesktop.DBus.Error.InvalidArgs');
    expect(await drainState()).toBe('none');
  });

  it('Drain: DrainState none -> draining -> drained with PropertiesChanged, a DrainStarted event by the caller, then DrainCompleted', async () => {
    expect(await drainState()).toBe('none');
    await call('Drain');
    expect(await drainState()).toBe('draining');
    expect(core.agent.startGate.held).toBe(true);
    await signals.waitFor((s) => s.member === 'PropertiesChanged' && changedProperties(s).DrainState === 'draining', { timeoutMs: 5000 });
    expect(stop.runs).toHaveLength(1);
    expect(stop.runs[0]!.options.kind).toBe('drain');

    await call('Drain'); // idempotent
    expect(stop.runs).toHaveLength(1);

    stop.runs[0]!.finish([machineResult('web', 'clean')]);
    await signals.waitFor((s) => s.member === 'PropertiesChanged' && changedProperties(s).DrainState === 'drained', { timeoutMs: 5000 });
    expect(await drainState()).toBe('drained');
    await waitFor(async () => (await hostEvents()).some((e) => e.reason === 'DrainCompleted'), { timeoutMs: 5000, what: 'DrainCompleted' });
    expect(await hostEvents()).toEqual([
      { reason: 'DrainStarted', uid: String(process.getuid!()), call: 'Drain' },
      { reason: 'DrainCompleted', uid: '', call: '' },
    ]);
  });

  it('Undrain: DrainState none, the gate released, Undrained by the caller; a second Undrain changes nothing', async () => {
    await call('Undrain');
    expect(await drainState()).toBe('none');
    expect(core.agent.startGate.held).toBe(false);
    await signals.waitFor((s) => s.member === 'PropertiesChanged' && changedProperties(s).DrainState === 'none', { timeoutMs: 5000 });
    const before = await hostEvents();
    expect(before.at(-1)).toEqual({ reason: 'Undrained', uid: String(process.getuid!()), call: 'Undrain' });
    await call('Undrain');
    expect(await hostEvents()).toEqual(before);
  });

  it('Undrain during a drain cancels its run: DrainCancelled, then Undrained', async () => {
    await call('Drain');
    const run = stop.runs.at(-1)!;
    await call('Undrain');
    expect(run.options.signal!.aborted).toBe(true);
    expect((await hostEvents()).slice(-3).map((e) => e.reason)).toEqual(['DrainStarted', 'DrainCancelled', 'Undrained']);
    expect(await drainState()).toBe('none');
  });

  it('Drain during a host shutdown is ShuttingDown and changes nothing', async () => {
    core.agent.enterShutdown('host-shutdown');
    try {
      const r = await dbusSend(daemon.address, ROOT, `${MANAGER}.Drain`);
      expect(r.errorName).toBe('org.vmkeeper1.Error.ShuttingDown');
      expect(await drainState()).toBe('none');
      expect(core.agent.startGate.held).toBe(false);
    } finally {
      core.agent.leaveShutdown();
    }
  });
});
