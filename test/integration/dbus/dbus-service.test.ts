import { readFile } from 'node:fs/promises';
import path from 'node:path';
import type { MessageBus } from 'dbus-next';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { connectBus } from '../../../src/dbus/bus-address.js';
import { DBusService } from '../../../src/dbus/dbus-service.js';
import { silentLogger } from '../../../src/logging/logger.js';
import { AgentError } from '../../../src/machine/errors.js';
import { VERSION } from '../../../src/version.js';
import {
  BusctlError,
  NOBODY,
  busctl,
  busctlCall,
  busctlGetProperty,
  dbusSend,
  ensureUserInGroup,
  type RunAs,
} from '../../support/busctl.js';
import { PROJECT_ROOT, startSessionBus, startSystemBus, type PrivateBus } from '../../support/dbus-daemon.js';
import { parseIntrospection } from '../../support/introspection.js';
import { Harness as AgentCore } from '../../support/agent-harness.js';
import { countSubscriptions, failNextCall } from '../../support/api-probes.js';
import { SignalRecorder, changedProperties } from '../../support/signals.js';
import { waitFor } from '../../support/wait.js';
import { captureLogger } from '../../support/records.js';

const ROOT = '/org/vmkeeper1';
const MANAGER = 'org.vmkeeper1.Manager';
const MACHINE = 'org.vmkeeper1.Machine';
const OBJECT_MANAGER = 'org.freedesktop.DBus.ObjectManager';
const WEB1 = '/org/vmkeeper1/machine/web_2d1';
const SPEC = JSON.stringify({ cpus: 1, memoryMiB: 256, disks: [{ name: 'root', sizeGiB: 1 }] });
// Past 2^32 ms and with sub-second digits, so a 32-bit or seconds-based conversion would show.
const T0 = 1_767_225_600_123;

/**
 * The real agent core (MachineService, reconciler, sweeper) on the fake hypervisor, an in-memory
 * store and a fake clock that starts at T0: deadlines only pass when a test moves the clock. ACPI
 * requests are ignored, so a guest stays up until its deadline and nothing moves on its own.
 */
async function startCore(): Promise<AgentCore> {
  return new AgentCore({
    behaviour: 'ignore',
    clockStartMs: T0,
    config: (c) => {
      c.libvirt.uri = 'test:///default';
      c.machines.sweepIntervalSec = 5;
      c.machines.shutdownRetryIntervalSec = 10;
    },
  }).start();
}

interface Harness {
  daemon: PrivateBus;
  conn: MessageBus;
  core: AgentCore;
  service: DBusService;
  signals: SignalRecorder;
  /** Listeners the D-Bus edge holds on the core's service. */
  subscriptions: () => number;
}

async function startHarness(kind: 'session' | 'system'): Promise<Harness> {
  const daemon = kind === 'session' ? await startSessionBus() : await startSystemBus();
  const conn = await connectBus(daemon.address);
  const core = await startCore();
  const subscriptions = countSubscriptions(core.service);
  const service = new DBusService({ bus: conn, api: core.service, logger: silentLogger });
  await service.start();
  const signals = await SignalRecorder.open(daemon.address);
  return { daemon, conn, core, service, signals, subscriptions };
}

async function stopHarness(h: Harness | undefined): Promise<void> {
  if (!h) return;
  h.signals.close();
  await h.service.stop();
  await h.core.agent.stop();
  h.conn.disconnect();
  await h.daemon.stop();
}

describe('DBusService on a private session-like bus', () => {
  let h: Harness;
  const call = (p: string, i: string, m: string, sig = '', args: (string | number)[] = []) =>
    busctlCall(h.daemon.address, p, i, m, sig, args);
  const prop = async (p: string, i: string, name: string) => (await busctlGetProperty(h.daemon.address, p, i, name)).data;

  beforeAll(async () => {
    h = await startHarness('session');
  });
  afterAll(() => stopHarness(h));
  afterEach(() => h.signals.clear());

  it('exposes every Manager property with its type', async () => {
    const all = await call(ROOT, 'org.freedesktop.DBus.Properties', 'GetAll', 's', [MANAGER]);
    expect(all.data).toEqual([
      {
        Version: { type: 's', data: VERSION },
        State: { type: 's', data: 'running' },
        LibvirtUri: { type: 's', data: 'test:///default' },
        LibvirtConnected: { type: 'b', data: true },
        DefaultGracePeriodSec: { type: 'u', data: 60 },
        SweepIntervalSec: { type: 'u', data: 5 },
        ShutdownRetryIntervalSec: { type: 'u', data: 10 },
        HostShutdownTimeoutSec: { type: 'u', data: 120 },
        DrainState: { type: 's', data: 'none' },
      },
    ]);
    expect(await prop(ROOT, MANAGER, 'Version')).toBe(VERSION);
  });

  it('creates a machine: escaped path, MachineNew and InterfacesAdded, 64-bit timestamps', async () => {
    const created = await call(ROOT, MANAGER, 'CreateMachine', 'ss', ['web-1', SPEC]);
    expect(created).toEqual({ type: 'o', data: [WEB1] });

    const added = await h.signals.waitFor((s) => s.member === 'InterfacesAdded');
    expect(added.path).toBe(ROOT);
    expect(added.body[0]).toBe(WEB1);
    const props = (added.body[1] as Record<string, Record<string, { value: unknown }>>)[MACHINE]!;
    expect(props.Name!.value).toBe('web-1');
    expect(props.CreatedAt!.value).toBe(BigInt(T0) * 1000n);
    expect(props.State!.value).toBe('pending');
    expect(props.ResourceVersion!.value).toBe(1n);
    const machineNew = await h.signals.waitFor((s) => s.member === 'MachineNew');
    expect(machineNew).toMatchObject({ path: ROOT, interface: MANAGER, body: ['web-1', WEB1] });

    expect(await prop(WEB1, MACHINE, 'Name')).toBe('web-1');
    expect(await prop(WEB1, MACHINE, 'DomainName')).toBe('vmkeeper-web-1');
    expect(await prop(WEB1, MACHINE, 'State')).toBe('running'); // the reconciler started the domain
    expect(await prop(WEB1, MACHINE, 'Power')).toBe('on');
    expect(await prop(WEB1, MACHINE, 'Uuid')).toMatch(/^[0-9a-f-]{36}$/);
    const createdAt = await busctl(h.daemon.address, ['get-property', 'org.vmkeeper1', WEB1, MACHINE, 'CreatedAt']);
    expect(createdAt.stdout.trim()).toBe(`t ${T0}000`); // exact: JSON numbers could round
    expect(await prop(WEB1, MACHINE, 'DeletionTimestamp')).toBe(0);
    expect(await prop(WEB1, MACHINE, 'ForceStopAt')).toBe(0);
    expect(await prop(WEB1, MACHINE, 'GracePeriodSec')).toBe(60);
    expect(await prop(WEB1, MACHINE, 'ResourceVersion')).toBe(h.core.service.get('web-1').resourceVersion);
    expect(JSON.parse((await prop(WEB1, MACHINE, 'Spec')) as string)).toMatchObject({ cpus: 1, memoryMiB: 256 });
  });

  it('GetMachine, ListMachines, DescribeMachine and Machine.Describe', async () => {
    expect((await call(ROOT, MANAGER, 'GetMachine', 's', ['web-1'])).data).toEqual([WEB1]);
    await call(ROOT, MANAGER, 'CreateMachine', 'ss', ['app', SPEC]);
    expect((await call(ROOT, MANAGER, 'ListMachines')).data).toEqual([
      [
        ['app', 'running', 'on', '/org/vmkeeper1/machine/app'],
        ['web-1', 'running', 'on', WEB1],
      ],
    ]);
    const [described] = (await call(ROOT, MANAGER, 'DescribeMachine', 's', ['web-1'])).data as string[];
    expect(JSON.parse(described!)).toMatchObject({ metadata: { name: 'web-1' }, status: { state: 'running' } });
    const [own] = (await call(WEB1, MACHINE, 'Describe')).data as string[];
    expect(JSON.parse(own!)).toMatchObject({ metadata: { name: 'web-1', createdAt: new Date(T0).toISOString() } });
  });

  it('GetManagedObjects lists every machine with its properties', async () => {
    const [objects] = (await call(ROOT, OBJECT_MANAGER, 'GetManagedObjects')).data as Record<string, any>[];
    expect(Object.keys(objects!).sort()).toEqual(['/org/vmkeeper1/machine/app', WEB1]);
    expect(objects![WEB1][MACHINE].Name).toEqual({ type: 's', data: 'web-1' });
    expect(objects![WEB1][MACHINE].Annotations).toEqual({ type: 'a{ss}', data: {} });
  });

  it('SetMachineAnnotations emits PropertiesChanged with only what changed', async () => {
    const version = h.core.service.get('web-1').resourceVersion;
    await call(ROOT, MANAGER, 'SetMachineAnnotations', 'sa{ss}', ['web-1', 1, 'owner', 'team-b']);
    const changed = await h.signals.waitFor((s) => s.member === 'PropertiesChanged' && s.path === WEB1);
    expect(changed.body[0]).toBe(MACHINE);
    // The Spec property shows the record's annotations: it changes with them (no stale copy).
    expect(changedProperties(changed)).toEqual({ Annotations: { owner: 'team-b' }, Spec: expect.any(String), ResourceVersion: BigInt(version + 1) });
    expect(JSON.parse(changedProperties(changed).Spec as string).annotations).toEqual({ owner: 'team-b' });
    expect(await prop(WEB1, MACHINE, 'Annotations')).toEqual({ owner: 'team-b' });
  });

  it('SetMachinePower and Machine.SetPower change State and Power', async () => {
    const version = h.core.service.get('web-1').resourceVersion;
    await call(ROOT, MANAGER, 'SetMachinePower', 'ss', ['web-1', 'off']);
    const off = await h.signals.waitFor((s) => s.member === 'PropertiesChanged' && s.path === WEB1);
    expect(changedProperties(off)).toEqual({
      State: 'stopping',
      Power: 'off',
      Spec: expect.any(String),
      ResourceVersion: BigInt(version + 1),
      ForceStopAt: BigInt(T0 + 60_000) * 1000n,
    });
    await call(WEB1, MACHINE, 'SetPower', 's', ['on']);
    await waitFor(async () => (await prop(WEB1, MACHINE, 'Power')) === 'on', { what: 'power on' });
  });

  it('deletion sets the timestamps, records events and emits MachineEvent', async () => {
    await h.core.advance(5000);
    h.signals.clear();
    await call(ROOT, MANAGER, 'DeleteMachineWithGracePeriod', 'su', ['web-1', 30]);
    const changed = await h.signals.waitFor((s) => s.member === 'PropertiesChanged' && s.path === WEB1);
    expect(changedProperties(changed)).toMatchObject({
      State: 'terminating',
      DeletionTimestamp: BigInt(T0 + 5000) * 1000n,
      ForceStopAt: BigInt(T0 + 35_000) * 1000n,
    });
    // The sweeper presses the power button right after the service marked the record; from then
    // on GracePeriodSec is the grace of the shutdown in progress (docs/dbus-api.md).
    const pressed = await h.signals.waitFor((s) => s.member === 'PropertiesChanged' && s.path === WEB1 && 'ShutdownRequestedAt' in changedProperties(s));
    expect(changedProperties(pressed)).toMatchObject({ ShutdownRequestedAt: BigInt(T0 + 5000) * 1000n, GracePeriodSec: 30 });
    const event = await h.signals.waitFor((s) => s.member === 'MachineEvent');
    expect(event.body).toEqual([BigInt(T0 + 5000) * 1000n, 'web-1', 'normal', 'DeletionRequested', 'deletion requested with a grace period of 30s']);
    const events = await busctl(h.daemon.address, ['call', 'org.vmkeeper1', ROOT, MANAGER, 'ListEvents']);
    const all = h.core.service.events();
    const line = all.map((e) => `${e.timestamp}000 "${e.machine}" "${e.type}" "${e.reason}" "${e.message}"`).join(' ');
    expect(events.stdout.trim()).toBe(`a(tssss) ${all.length} ${line}`); // exact: JSON numbers could round
    expect(events.stdout).toContain(`${T0 + 5000}000 "web-1" "normal" "DeletionRequested" "deletion requested with a grace period of 30s"`);

    // Deleting again never moves the deadline, and Machine.Delete reaches the same api.
    h.signals.clear();
    await call(ROOT, MANAGER, 'DeleteMachine', 's', ['web-1']);
    await call(WEB1, MACHINE, 'Delete');
    expect(await prop(WEB1, MACHINE, 'ForceStopAt')).toBe((T0 + 35_000) * 1000);
  });

  it('a finished deletion unexports the object with MachineRemoved and InterfacesRemoved', async () => {
    // A grace of 0 moves the deadline to now: the sweeper destroys the domain and removes the record.
    await call(WEB1, MACHINE, 'DeleteWithGracePeriod', 'u', [0]);
    const shortened = await h.signals.waitFor((s) => s.member === 'PropertiesChanged' && s.path === WEB1 && 'ForceStopAt' in changedProperties(s));
    expect(changedProperties(shortened).ForceStopAt).toBe(BigInt(T0 + 5000) * 1000n);
    const removed = await h.signals.waitFor((s) => s.member === 'InterfacesRemoved');
    expect(removed).toMatchObject({ path: ROOT, body: [WEB1, [MACHINE]] });
    const machineRemoved = await h.signals.waitFor((s) => s.member === 'MachineRemoved');
    expect(machineRemoved.body).toEqual(['web-1', WEB1]);
    await expect(busctlGetProperty(h.daemon.address, WEB1, MACHINE, 'Name')).rejects.toBeInstanceOf(BusctlError);
    const [objects] = (await call(ROOT, OBJECT_MANAGER, 'GetManagedObjects')).data as Record<string, unknown>[];
    expect(Object.keys(objects!)).toEqual(['/org/vmkeeper1/machine/app']);
    expect(h.signals.find('MachineEvent').map((s) => s.body[3])).toEqual(['ForceStopped', 'Deleted']);
  });

  it('Manager properties emit PropertiesChanged only for values that changed', async () => {
    h.core.hv.setAvailable(false);
    await h.core.advance(1000); // the observer's next poll
    const changed = await h.signals.waitFor((s) => s.member === 'PropertiesChanged' && s.path === ROOT);
    expect(changed.body[0]).toBe(MANAGER);
    expect(changedProperties(changed)).toEqual({ State: 'degraded', LibvirtConnected: false });
    expect(await prop(ROOT, MANAGER, 'State')).toBe('degraded');
    h.core.hv.setAvailable(true);
    await h.core.advanceUntil(() => h.core.service.info().libvirtConnected);
  });

  it.each([
    ['GetMachine', ['string:nope'], 'org.vmkeeper1.Error.NoSuchMachine', 'no machine named "nope"'],
    ['CreateMachine', ['string:Bad_Name', `string:${SPEC}`], 'org.vmkeeper1.Error.InvalidName', 'invalid machine name'],
    ['CreateMachine', ['string:x1', 'string:{"cpus":1,"disks":[],"bogus":1}'], 'org.vmkeeper1.Error.InvalidSpec', 'bogus'],
    ['CreateMachine', ['string:app', `string:${SPEC.replace('"cpus":1', '"cpus":2')}`], 'org.vmkeeper1.Error.MachineExists', 'already exists'],
    ['SetMachinePower', ['string:app', 'string:sideways'], 'org.vmkeeper1.Error.InvalidSpec', 'power'],
    ['DeleteMachine', ['string:nope'], 'org.vmkeeper1.Error.NoSuchMachine', 'nope'],
  ])('%s %j fails with %s', async (method, args, name, text) => {
    const outcome = await dbusSend(h.daemon.address, ROOT, `${MANAGER}.${method}`, args);
    expect(outcome).toMatchObject({ ok: false, errorName: name });
    expect(outcome.message).toContain(text);
  });

  it('maps errors the api throws, including NotSupported, on both interfaces', async () => {
    failNextCall(h.core.service, 'setPower', new AgentError('NotSupported', 'power control is not implemented yet'));
    const outcome = await dbusSend(h.daemon.address, '/org/vmkeeper1/machine/app', `${MACHINE}.SetPower`, ['string:off']);
    expect(outcome).toMatchObject({ errorName: 'org.freedesktop.DBus.Error.NotSupported', message: 'power control is not implemented yet' });
    failNextCall(h.core.service, 'get', new AgentError('HypervisorUnavailable', 'libvirt is down'));
    const described = await dbusSend(h.daemon.address, '/org/vmkeeper1/machine/app', `${MACHINE}.Describe`);
    expect(described.errorName).toBe('org.vmkeeper1.Error.HypervisorUnavailable');
  });

  it('a non-AgentError becomes org.freedesktop.DBus.Error.Failed with one line and no stack', async () => {
    const boom = new TypeError("Cannot read properties of undefined (reading 'status')");
    // ListMachines answers from the exported objects; DescribeMachine still asks the service.
    failNextCall(h.core.service, 'get', boom);
    const outcome = await dbusSend(h.daemon.address, ROOT, `${MANAGER}.DescribeMachine`, ['string:app']);
    expect(outcome).toMatchObject({ errorName: 'org.freedesktop.DBus.Error.Failed', message: boom.message });
    failNextCall(h.core.service, 'events', new Error('first line\n    at secret (/srv/app/src/x.ts:1:1)'));
    const viaBusctl = await busctl(h.daemon.address, ['call', 'org.vmkeeper1', ROOT, MANAGER, 'ListEvents']);
    expect(viaBusctl.code).not.toBe(0);
    expect(viaBusctl.stderr.trim()).toBe('Call failed: first line');
    expect(viaBusctl.stderr).not.toMatch(/\.ts:\d+|\.js:\d+|\bat /);
  });

  it('rejects Properties.Set with PropertyReadOnly and keeps the value', async () => {
    const app = '/org/vmkeeper1/machine/app';
    const set = await dbusSend(h.daemon.address, app, 'org.freedesktop.DBus.Properties.Set', [
      `string:${MACHINE}`,
      'string:Name',
      'variant:string:evil',
    ]);
    expect(set).toMatchObject({ ok: false, errorName: 'org.freedesktop.DBus.Error.PropertyReadOnly' });
    const setManager = await busctl(h.daemon.address, ['set-property', 'org.vmkeeper1', ROOT, MANAGER, 'DefaultGracePeriodSec', 'u', '1']);
    expect(setManager.code).not.toBe(0);
    const unknown = await dbusSend(h.daemon.address, app, 'org.freedesktop.DBus.Properties.Set', [
      `string:${MACHINE}`,
      'string:Nope',
      'variant:string:x',
    ]);
    expect(unknown.errorName).toBe('org.freedesktop.DBus.Error.UnknownProperty');
    expect(await prop(app, MACHINE, 'Name')).toBe('app');
    expect(await prop(ROOT, MANAGER, 'DefaultGracePeriodSec')).toBe(60);
  });

  it.each([
    [ROOT, 'org.vmkeeper1.Manager.xml', [MANAGER, OBJECT_MANAGER]],
    ['/org/vmkeeper1/machine/app', 'org.vmkeeper1.Machine.xml', [MACHINE]],
  ])('Introspect of %s matches %s', async (objectPath, file, interfaces) => {
    const kept = parseIntrospection(await readFile(path.join(PROJECT_ROOT, 'src/dbus/introspection', file), 'utf8'));
    const [xml] = (await call(objectPath, 'org.freedesktop.DBus.Introspectable', 'Introspect')).data as string[];
    const live = parseIntrospection(xml!);
    expect(Object.keys(kept).sort()).toEqual([...interfaces].sort());
    for (const name of interfaces) expect(live[name], name).toEqual(kept[name]);
    if (objectPath === ROOT) expect(xml).toContain('<node name="machine"/>');
  });

  it('refuses to start a second owner of the name and leaves the first one serving', async () => {
    const conn2 = await connectBus(h.daemon.address);
    const core2 = await startCore();
    const subscriptions2 = countSubscriptions(core2.service);
    const second = new DBusService({ bus: conn2, api: core2.service, logger: silentLogger });
    await expect(second.start()).rejects.toThrow(/org\.vmkeeper1 is already owned/);
    expect(subscriptions2()).toBe(0);
    conn2.disconnect();
    await core2.agent.stop();
    expect((await call(ROOT, MANAGER, 'GetMachine', 's', ['app'])).data).toEqual(['/org/vmkeeper1/machine/app']);
  });

  it('stop() releases the name and unsubscribes; start() again serves existing machines', async () => {
    await h.service.stop();
    expect(h.subscriptions()).toBe(0);
    const owner = await busctl(h.daemon.address, ['status', 'org.vmkeeper1']);
    expect(owner.code).not.toBe(0);
    await h.service.start();
    expect(await prop('/org/vmkeeper1/machine/app', MACHINE, 'Name')).toBe('app');
  });
});

describe('bus policy on a private system-like bus', () => {
  let h: Harness;
  let member: RunAs;
  const APP = '/org/vmkeeper1/machine/app';

  beforeAll(async () => {
    member = await ensureUserInGroup('vmkeeper-test', 'vmkeeper');
    h = await startHarness('system');
  });
  afterAll(() => stopHarness(h));

  it('root owns the name and may create', async () => {
    const created = await busctlCall(h.daemon.address, ROOT, MANAGER, 'CreateMachine', 'ss', ['app', SPEC]);
    expect(created.data).toEqual([APP]);
  });

  it.each([
    ['ListMachines', () => busctlCall(h.daemon.address, ROOT, MANAGER, 'ListMachines', '', [], { as: NOBODY })],
    ['GetMachine', () => busctlCall(h.daemon.address, ROOT, MANAGER, 'GetMachine', 's', ['app'], { as: NOBODY })],
    ['DescribeMachine', () => busctlCall(h.daemon.address, ROOT, MANAGER, 'DescribeMachine', 's', ['app'], { as: NOBODY })],
    ['ListEvents', () => busctlCall(h.daemon.address, ROOT, MANAGER, 'ListEvents', '', [], { as: NOBODY })],
    ['Machine.Describe', () => busctlCall(h.daemon.address, APP, MACHINE, 'Describe', '', [], { as: NOBODY })],
    ['get-property', () => busctlGetProperty(h.daemon.address, APP, MACHINE, 'State', { as: NOBODY })],
    ['GetAll', () => busctlCall(h.daemon.address, ROOT, 'org.freedesktop.DBus.Properties', 'GetAll', 's', [MANAGER], { as: NOBODY })],
    ['GetManagedObjects', () => busctlCall(h.daemon.address, ROOT, OBJECT_MANAGER, 'GetManagedObjects', '', [], { as: NOBODY })],
    ['Introspect', () => busctlCall(h.daemon.address, APP, 'org.freedesktop.DBus.Introspectable', 'Introspect', '', [], { as: NOBODY })],
  ])('nobody may %s', async (_, read) => {
    await expect(read()).resolves.toHaveProperty('type');
  });

  it.each([
    [ROOT, `${MANAGER}.CreateMachine`, ['string:other', `string:${SPEC}`]],
    [ROOT, `${MANAGER}.DeleteMachine`, ['string:app']],
    [ROOT, `${MANAGER}.DeleteMachineWithGracePeriod`, ['string:app', 'uint32:0']],
    [ROOT, `${MANAGER}.SetMachinePower`, ['string:app', 'string:off']],
    [ROOT, `${MANAGER}.SetMachineAnnotations`, ['string:app', 'dict:string:string:a,b']],
    [APP, `${MACHINE}.Delete`, []],
    [APP, `${MACHINE}.DeleteWithGracePeriod`, ['uint32:0']],
    [APP, `${MACHINE}.SetPower`, ['string:off']],
    [APP, 'org.freedesktop.DBus.Properties.Set', [`string:${MACHINE}`, 'string:Power', 'variant:string:off']],
  ])('nobody gets AccessDenied for %s %s', async (objectPath, member, args) => {
    const outcome = await dbusSend(h.daemon.address, objectPath, member, args, { as: NOBODY });
    expect(outcome).toMatchObject({ ok: false, errorName: 'org.freedesktop.DBus.Error.AccessDenied' });
  });

  it('nobody changed nothing', async () => {
    expect(h.core.service.get('app')).toMatchObject({ deletionTimestamp: 0, annotations: {}, spec: { power: 'on' } });
    expect(h.core.exists('other')).toBe(false);
  });

  it('the same user without the vmkeeper group is denied', async () => {
    const outsider = { ...member, initGroups: false };
    const outcome = await dbusSend(h.daemon.address, ROOT, `${MANAGER}.SetMachinePower`, ['string:app', 'string:off'], { as: outsider });
    expect(outcome.errorName).toBe('org.freedesktop.DBus.Error.AccessDenied');
  });

  it('a member of group vmkeeper may change state', async () => {
    await busctlCall(h.daemon.address, ROOT, MANAGER, 'SetMachinePower', 'ss', ['app', 'off'], { as: member });
    await busctlCall(h.daemon.address, ROOT, MANAGER, 'SetMachineAnnotations', 'sa{ss}', ['app', 1, 'by', 'member'], { as: member });
    await busctlCall(h.daemon.address, ROOT, MANAGER, 'CreateMachine', 'ss', ['other', SPEC], { as: member });
    await busctlCall(h.daemon.address, APP, MACHINE, 'Delete', '', [], { as: member });
    expect(h.core.service.get('app')).toMatchObject({ annotations: { by: 'member' }, spec: { power: 'off' } });
    expect(h.core.service.get('app').deletionTimestamp).toBeGreaterThan(0);
    expect(h.core.exists('other')).toBe(true);
  });
});

describe('DBusService when its connection goes away', () => {
  it('a reply after disconnect does not crash, and stop() still returns', async () => {
    const daemon = await startSessionBus();
    try {
      const conn = await connectBus(daemon.address);
      let release!: () => void;
      const held = new Promise<void>((resolve) => (release = resolve));
      let entered = false;
      const core = await startCore();
      const api = core.service;
      const subscriptions = countSubscriptions(api);
      const create = api.create.bind(api);
      api.create = async (name, spec) => {
        entered = true;
        await held; // the reply is due only after the connection is gone
        return create(name, spec);
      };
      const service = new DBusService({ bus: conn, api, logger: silentLogger });
      await service.start();
      const pending = busctlCall(daemon.address, ROOT, MANAGER, 'CreateMachine', 'ss', ['late', SPEC]).catch((e: unknown) => e);
      await waitFor(() => entered, { what: 'CreateMachine to reach the api' });
      conn.disconnect();
      release();
      expect(await pending).toBeInstanceOf(BusctlError);
      await waitFor(() => core.exists('late'), { what: 'the api to finish' });
      await service.stop();
      expect(subscriptions()).toBe(0);
      await core.agent.stop();
    } finally {
      await daemon.stop();
    }
  });
});

describe('DBusService with a record it cannot encode (e.g. a hand-edited state file)', () => {
  it('answers Get(Annotations) with InternalError, leaves the machine out of GetManagedObjects, logs both', async () => {
    const daemon = await startSessionBus();
    const conn = await connectBus(daemon.address);
    const logger = captureLogger();
    const core = await startCore();
    const api = core.service;
    const service = new DBusService({ bus: conn, api, logger });
    try {
      await service.start();
      await api.create('fine', SPEC);
      await api.create('bad', SPEC);
      // Past the API's validation, as a record loaded from a tampered file would be.
      await core.agent.records.update('bad', (r) => void (r.annotations = { note: 'a\u0000b', other: '\uffff' }));
      const annotations = await dbusSend(daemon.address, '/org/vmkeeper1/machine/bad', 'org.freedesktop.DBus.Properties.Get', [`string:${MACHINE}`, 'string:Annotations']);
      expect(annotations.errorName).toBe('org.vmkeeper1.Error.InternalError');
      const [objects] = (await busctlCall(daemon.address, ROOT, OBJECT_MANAGER, 'GetManagedObjects')).data as Record<string, unknown>[];
      expect(Object.keys(objects!)).toEqual(['/org/vmkeeper1/machine/fine']);
      expect(logger.lines.filter((l) => l.level === 'error').map((l) => l.message)).toEqual(
        expect.arrayContaining([expect.stringMatching(/not sent/), expect.stringMatching(/left out of GetManagedObjects/)]),
      );
    } finally {
      await service.stop();
      await core.agent.stop();
      conn.disconnect();
      await daemon.stop();
    }
  });
});
