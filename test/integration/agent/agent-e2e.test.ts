import { mkdtemp, readdir, rm, writeFile, mkdir, readFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { busctlCall, busctlGetProperty, dbusSend, NOBODY, run } from '../../support/busctl.js';
import { startSystemBus, type PrivateBus, PROJECT_ROOT } from '../../support/dbus-daemon.js';
import { agentArgs, MAIN_TS, startAgent, type AgentProcess, type AgentProcessOptions } from '../../support/agent-process.js';
import { SignalRecorder } from '../../support/signals.js';
import { waitFor } from '../../support/wait.js';

// The real agent as its own process, on a system-like dbus-daemon carrying the project's policy
// and on libvirt's test driver: every Manager method, the error names, the policy, restarts.

const MANAGER = ['/org/vmkeeper1', 'org.vmkeeper1.Manager'] as const;
const MACHINE = 'org.vmkeeper1.Machine';
const SPEC = JSON.stringify({ cpus: 1, memoryMiB: 128, disks: [{ name: 'root', sizeGiB: 1 }], annotations: { owner: 'team-a' } });

let bus: PrivateBus;
let dir: string;
let opts: AgentProcessOptions;
let agent: AgentProcess;
/** When the last restart began, in microseconds since the epoch (the unit of event timestamps). */
let restartedAtUsec = 0;

const call = (method: string, sig = '', args: (string | number)[] = []) => busctlCall(bus.address, ...MANAGER, method, sig, args);
const prop = async (p: string, name: string) => (await busctlGetProperty(bus.address, p, MACHINE, name)).data;
const managerProp = async (name: string) => (await busctlGetProperty(bus.address, ...MANAGER, name)).data;
const send = (member: string, args: string[] = [], as?: typeof NOBODY) => dbusSend(bus.address, MANAGER[0], `${MANAGER[1]}.${member}`, args, { as });
type EventRow = [number, string, string, string, string];
const events = async () => ((await call('ListEvents')).data as [EventRow[]])[0];
/** Whether the agent started `machine`'s domain at or after `usec` (event timestamps are microseconds). */
const startedSince = async (machine: string, usec: number) => (await events()).some((e) => e[1] === machine && e[3] === 'Started' && e[0] >= usec);
const names = async () => ((await call('ListMachines')).data as [Array<[string, string, string, string]>])[0].map((m) => m[0]);

beforeAll(async () => {
  bus = await startSystemBus();
  dir = await mkdtemp(path.join(os.tmpdir(), 'vmkeeper-e2e-'));
  await mkdir(path.join(dir, 'images'));
  await writeFile(path.join(dir, 'node.xml'), '<node/>');
  opts = { busAddress: bus.address, stateDir: path.join(dir, 'state'), imageDir: path.join(dir, 'images'), libvirtUri: `test://${dir}/node.xml` };
  agent = await startAgent(opts);
}, 60_000);

afterAll(async () => {
  await agent?.stop();
  await bus?.stop();
  await rm(dir, { recursive: true, force: true });
});

describe('vmkeeperd over D-Bus on the libvirt test driver', () => {
  it('creates a machine that becomes running, and lists, describes and exposes it', async () => {
    const signals = await SignalRecorder.open(bus.address);
    const reply = await call('CreateMachine', 'ss', ['web-1', SPEC]);
    expect(reply.data).toEqual(['/org/vmkeeper1/machine/web_2d1']);
    const p = '/org/vmkeeper1/machine/web_2d1';
    await waitFor(async () => (await prop(p, 'State')) === 'running', { timeoutMs: 10_000, what: 'web-1 running' });
    expect((await call('ListMachines')).data).toEqual([[['web-1', 'running', 'on', p]]]);
    expect((await call('GetMachine', 's', ['web-1'])).data).toEqual([p]);
    const described = JSON.parse(((await call('DescribeMachine', 's', ['web-1'])).data as string[])[0]!);
    expect(described).toMatchObject({ metadata: { name: 'web-1', annotations: { owner: 'team-a' } }, status: { state: 'running', power: 'on' } });
    expect(await prop(p, 'Name')).toBe('web-1');
    expect(await prop(p, 'DomainName')).toBe('vmkeeper-web-1');
    expect(await prop(p, 'Uuid')).toBe(described.metadata.uuid);
    expect(await prop(p, 'Power')).toBe('on');
    expect(await prop(p, 'Annotations')).toEqual({ owner: 'team-a' });
    expect(JSON.parse((await prop(p, 'Spec')) as string)).toMatchObject({ cpus: 1, memoryMiB: 128 });
    const createdAt = Number(await prop(p, 'CreatedAt'));
    expect(Math.abs(createdAt / 1000 - Date.now())).toBeLessThan(60_000); // microseconds since the epoch
    expect(Number(await prop(p, 'DeletionTimestamp'))).toBe(0);
    expect(Number(await prop(p, 'ResourceVersion'))).toBeGreaterThan(0);
    await signals.waitFor((s) => s.member === 'MachineNew' && s.body[0] === 'web-1');
    await signals.waitFor((s) => s.member === 'InterfacesAdded' && s.body[0] === p);
    await signals.waitFor((s) => s.member === 'PropertiesChanged' && s.path === p && JSON.stringify(s.body, (_k, v) => (typeof v === 'bigint' ? String(v) : v)).includes('running'));
    signals.close();
    const disk = path.join(opts.stateDir, 'guests/web-1/disk-root.qcow2');
    expect((await run('qemu-img', ['info', disk])).stdout).toMatch(/virtual size: 1 GiB/);
  });

  it('exposes the manager properties', async () => {
    expect(await managerProp('State')).toBe('running');
    expect(await managerProp('LibvirtConnected')).toBe(true);
    expect(await managerProp('LibvirtUri')).toBe(opts.libvirtUri);
    expect(await managerProp('Version')).toMatch(/^\d+\.\d+\.\d+/);
    expect(await managerProp('DefaultGracePeriodSec')).toBe(60);
    expect(await managerProp('SweepIntervalSec')).toBe(10);
    expect(await managerProp('ShutdownRetryIntervalSec')).toBe(5);
    expect(await managerProp('HostShutdownTimeoutSec')).toBe(120);
  });

  it.each<[string, string[], string]>([
    ['a name with a slash', ['string:web/1', `string:${SPEC}`], 'org.vmkeeper1.Error.InvalidName'],
    ['a name with ..', ['string:..', `string:${SPEC}`], 'org.vmkeeper1.Error.InvalidName'],
    ['a unicode name', ['string:wéb', `string:${SPEC}`], 'org.vmkeeper1.Error.InvalidName'],
    ['a 64-character name', [`string:${'a'.repeat(64)}`, `string:${SPEC}`], 'org.vmkeeper1.Error.InvalidName'],
    ['bad JSON', ['string:ok-1', 'string:{"cpus":'], 'org.vmkeeper1.Error.InvalidSpec'],
    ['an unknown key', ['string:ok-1', 'string:{"cpus":1,"gpu":true,"disks":[]}'], 'org.vmkeeper1.Error.InvalidSpec'],
    ['a path outside the image directories', ['string:ok-1', 'string:{"boot":{"kernel":"/etc/shadow"}}'], 'org.vmkeeper1.Error.InvalidSpec'],
    ['XML in a network name', ['string:ok-1', `string:{"disks":[{"name":"r","sizeGiB":1}],"nics":[{"name":"e","network":"x'/><evil/>"}]}`], 'org.vmkeeper1.Error.InvalidSpec'],
    ['an oversized spec', ['string:ok-1', `string:{"annotations":{"a":"${'x'.repeat(70_000)}"}}`], 'org.vmkeeper1.Error.InvalidSpec'],
    ['a machine that exists, with another spec', ['string:web-1', `string:${SPEC.replace('"cpus":1', '"cpus":2')}`], 'org.vmkeeper1.Error.MachineExists'],
    // The inbound filter checks the signature against the method's before the body is parsed (as sd-bus and GLib do).
    ['wrong argument types', ['string:ok-1', 'uint32:7'], 'org.freedesktop.DBus.Error.InvalidArgs'],
  ])('CreateMachine with %s is refused by name and stores nothing', async (_what, args, errorName) => {
    const before = await names();
    const outcome = await send('CreateMachine', args);
    expect(outcome.ok).toBe(false);
    expect(outcome.errorName).toBe(errorName);
    expect(outcome.message).not.toMatch(/\n\s+at /); // never a stack trace
    expect(await names()).toEqual(before);
  });

  it('names the error for unknown machines, bad power values and 64 KiB annotations', async () => {
    expect((await send('GetMachine', ['string:ghost'])).errorName).toBe('org.vmkeeper1.Error.NoSuchMachine');
    expect((await send('DescribeMachine', ['string:ghost'])).errorName).toBe('org.vmkeeper1.Error.NoSuchMachine');
    expect((await send('DeleteMachine', ['string:ghost'])).errorName).toBe('org.vmkeeper1.Error.NoSuchMachine');
    expect((await send('GetMachine', ['string:../etc'])).errorName).toBe('org.vmkeeper1.Error.InvalidName');
    expect((await send('SetMachinePower', ['string:web-1', 'string:sideways'])).errorName).toBe('org.vmkeeper1.Error.InvalidSpec');
    const huge = await send('SetMachineAnnotations', ['string:web-1', `dict:string:string:big,${'x'.repeat(65_536)}`]);
    expect(huge.errorName).toBe('org.vmkeeper1.Error.InvalidSpec');
    expect(await prop('/org/vmkeeper1/machine/web_2d1', 'Annotations')).toEqual({ owner: 'team-a' });
    await call('SetMachineAnnotations', 'a{ss}', ['web-1', 1, 'owner', 'team-b'].map(String)).catch(async () => {
      await send('SetMachineAnnotations', ['string:web-1', 'dict:string:string:owner,team-b']);
    });
    await waitFor(async () => JSON.stringify(await prop('/org/vmkeeper1/machine/web_2d1', 'Annotations')) === '{"owner":"team-b"}', { what: 'annotations' });
  });

  it('lets a caller outside the vmkeeper group read but change nothing', async () => {
    const list = await send('ListMachines', [], NOBODY);
    expect(list.ok).toBe(true);
    expect((await send('GetMachine', ['string:web-1'], NOBODY)).ok).toBe(true);
    expect((await send('DescribeMachine', ['string:web-1'], NOBODY)).ok).toBe(true);
    expect((await send('ListEvents', [], NOBODY)).ok).toBe(true);
    for (const [member, args] of [
      ['CreateMachine', ['string:evil', `string:${SPEC}`]],
      ['DeleteMachine', ['string:web-1']],
      ['DeleteMachineWithGracePeriod', ['string:web-1', 'uint32:0']],
      ['SetMachinePower', ['string:web-1', 'string:off']],
      ['SetMachineAnnotations', ['string:web-1', 'dict:string:string:a,b']],
    ] as const) {
      const outcome = await send(member, [...args], NOBODY);
      expect(outcome.errorName, member).toBe('org.freedesktop.DBus.Error.AccessDenied');
    }
    expect(await names()).toEqual(['web-1']);
    expect(await prop('/org/vmkeeper1/machine/web_2d1', 'State')).toBe('running');
  });

  it('powers a machine off and on again', async () => {
    const p = '/org/vmkeeper1/machine/web_2d1';
    await call('SetMachinePower', 'ss', ['web-1', 'off']);
    await waitFor(async () => (await prop(p, 'State')) === 'stopped', { timeoutMs: 10_000, what: 'stopped' });
    expect(await prop(p, 'Power')).toBe('off');
    await call('SetMachinePower', 'ss', ['web-1', 'on']);
    await waitFor(async () => (await prop(p, 'State')) === 'running', { timeoutMs: 10_000, what: 'running again' });
  });

  it('keeps records and objects across a restart and recreates the vanished domain', async () => {
    await call('CreateMachine', 'ss', ['db-1', SPEC]);
    await waitFor(async () => (await prop('/org/vmkeeper1/machine/db_2d1', 'State')) === 'running', { timeoutMs: 10_000, what: 'db-1 running' });
    const uuid = await prop('/org/vmkeeper1/machine/db_2d1', 'Uuid');
    expect((await agent.stop('SIGTERM')).code).toBe(0);
    // The test driver keeps its state in the agent's process: after the restart every domain is gone.
    // State alone cannot show the recreation: until the first pass it is the record's last known value.
    restartedAtUsec = Date.now() * 1000;
    agent = await startAgent(opts);
    expect(await names()).toEqual(['db-1', 'web-1']);
    expect(await prop('/org/vmkeeper1/machine/db_2d1', 'Uuid')).toBe(uuid);
    for (const name of ['db-1', 'web-1']) {
      await waitFor(() => startedSince(name, restartedAtUsec), { timeoutMs: 10_000, what: `${name} defined and started again` });
    }
    await waitFor(async () => (await prop('/org/vmkeeper1/machine/db_2d1', 'State')) === 'running', { timeoutMs: 10_000, what: 'db-1 running' });
    await waitFor(async () => (await prop('/org/vmkeeper1/machine/web_2d1', 'State')) === 'running', { timeoutMs: 10_000, what: 'web-1 running' });
    const undefinedOutside = (await events()).filter((e) => e[3] === 'DomainUndefined' && e[0] >= restartedAtUsec).map((e) => e[1]);
    expect(undefinedOutside.sort()).toEqual(['db-1', 'web-1']);
  });

  it('survives kill -9 with every acknowledged record intact', async () => {
    await call('CreateMachine', 'ss', ['crash-1', SPEC]);
    await agent.stop('SIGKILL');
    restartedAtUsec = Date.now() * 1000;
    agent = await startAgent(opts);
    expect(await names()).toContain('crash-1');
  });

  it('deletes gracefully and announces every step', async () => {
    const signals = await SignalRecorder.open(bus.address);
    const p = '/org/vmkeeper1/machine/db_2d1';
    // The restart before this test gives the test driver fresh state: the agent defines db-1 again
    // and starts it in its restore order. A graceful deletion is about a guest that runs. The State
    // property cannot tell: until the first pass it is the record's last known 'running', for a
    // domain the new test driver does not have yet. The Started event since the restart can.
    await waitFor(() => startedSince('db-1', restartedAtUsec), { timeoutMs: 10_000, what: 'db-1 started again after the restart' });
    await waitFor(async () => (await prop(p, 'State')) === 'running', { timeoutMs: 10_000, what: 'db-1 running again after the restart' });
    await call('DeleteMachineWithGracePeriod', 'su', ['db-1', 30]);
    await signals.waitFor((s) => s.member === 'MachineRemoved' && s.body[0] === 'db-1', { timeoutMs: 10_000 });
    await signals.waitFor((s) => s.member === 'InterfacesRemoved' && s.body[0] === p);
    const dbEvents = (await events()).filter((e) => e[1] === 'db-1');
    expect(dbEvents.map((e) => e[3])).toEqual(expect.arrayContaining(['DeletionRequested', 'ShutdownRequested', 'ShutdownCompleted', 'Deleted']));
    expect(signals.find('MachineEvent').some((s) => s.body[3] === 'Deleted')).toBe(true);
    expect((await send('GetMachine', ['string:db-1'])).errorName).toBe('org.vmkeeper1.Error.NoSuchMachine');
    expect(await readdir(path.join(opts.stateDir, 'guests'))).not.toContain('db-1');
    signals.close();
  });

  it('moves a corrupt record aside at start-up and keeps serving', async () => {
    await agent.stop();
    await writeFile(path.join(opts.stateDir, 'machines', 'broken.json'), '{"apiVersion": "vmkeeper/v1", "name": ');
    agent = await startAgent(opts);
    expect(await names()).not.toContain('broken');
    expect(agent.output()).toMatch(/broken\.json/);
    const quarantine = await readdir(path.join(opts.stateDir, 'quarantine'));
    expect(quarantine.some((f) => f.startsWith('broken.json'))).toBe(true);
  });
});

describe('vmkeeperd start-up failures and degraded mode', () => {
  it('refuses a broken config file, naming file, line and key', async () => {
    const config = path.join(dir, 'bad.yaml');
    await writeFile(config, 'machines:\n  sweepIntervalSec: ten\n');
    const result = await run(process.execPath, ['--import', 'tsx', MAIN_TS, ...agentArgs({ ...opts, configFile: config })], { timeoutMs: 30_000 });
    expect(result.code).toBe(78);
    expect(result.stderr).toContain(`${config}:2`);
    expect(result.stderr).toContain('machines.sweepIntervalSec');
  });

  it('runs degraded without libvirt, keeps answering, and stores new machines', async () => {
    const other = await startSystemBus();
    const state = path.join(dir, 'degraded-state');
    const degraded = await startAgent({ ...opts, busAddress: other.address, stateDir: state, libvirtUri: 'qemu+unix:///system?socket=/nonexistent/libvirt-sock' });
    try {
      const get = async (n: string) => (await busctlGetProperty(other.address, ...MANAGER, n)).data;
      expect(await get('State')).toBe('degraded');
      expect(await get('LibvirtConnected')).toBe(false);
      await busctlCall(other.address, ...MANAGER, 'CreateMachine', 'ss', ['later', SPEC]);
      expect(await busctlGetProperty(other.address, '/org/vmkeeper1/machine/later', MACHINE, 'State')).toMatchObject({ data: 'pending' });
      expect(JSON.parse(await readFile(path.join(state, 'machines/later.json'), 'utf8'))).toMatchObject({ name: 'later' });
    } finally {
      await degraded.stop();
      await other.stop();
    }
  });
});

void PROJECT_ROOT;
