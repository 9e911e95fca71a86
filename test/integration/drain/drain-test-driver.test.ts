import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { drainStateFile } from '../../../src/machine/paths.js';
import { startAgent, type AgentProcess, type AgentProcessOptions } from '../../support/agent-process.js';
import { busctlCall, busctlGetProperty } from '../../support/busctl.js';
import { startSystemBus, type PrivateBus } from '../../support/dbus-daemon.js';
import { waitFor } from '../../support/wait.js';

// Drain and undrain through the real agent process on libvirt's test driver: three priority
// groups with one machine per host-shutdown action, the events in order, nothing started while
// drained (also across a restart of the agent), and the guests back in start-priority order.

const MANAGER = ['/org/vmkeeper1', 'org.vmkeeper1.Manager'] as const;
const MACHINE = 'org.vmkeeper1.Machine';
const spec = (o: { action: string; shutdownPriority: number; startPriority: number }) =>
  JSON.stringify({ cpus: 1, memoryMiB: 64, disks: [{ name: 'root', sizeGiB: 1 }], hostShutdownAction: o.action, shutdownPriority: o.shutdownPriority, startPriority: o.startPriority });

// Stop order: db (group 300) -> app (group 100) -> cache (group 0). Start order: cache, app, db.
const MACHINES = {
  db: { action: 'save', shutdownPriority: 500, startPriority: 10 },
  app: { action: 'shutdown', shutdownPriority: 150, startPriority: 50 },
  cache: { action: 'force', shutdownPriority: 0, startPriority: 900 },
};
const CONFIG = [
  'hostShutdown:',
  '  timeoutSec: 60',
  '  groups:',
  '    - {minPriority: 300, budgetSec: 20}',
  '    - {minPriority: 100, budgetSec: 20}',
  '    - {minPriority: 0, budgetSec: 20}',
  // One start at a time, so the order the starts end in is the order they began in.
  'restore:',
  '  parallelism: 1',
  'machines:',
  '  resyncIntervalSec: 1',
  '',
].join('\n');

type EventRow = [number, number, string, string, string, string, string, string];

let bus: PrivateBus;
let dir: string;
let opts: AgentProcessOptions;
let agent: AgentProcess;

const call = (method: string, sig = '', args: (string | number)[] = []) => busctlCall(bus.address, ...MANAGER, method, sig, args);
const drainState = async () => (await busctlGetProperty(bus.address, ...MANAGER, 'DrainState')).data;
const machineProp = async (name: string, p: string) => (await busctlGetProperty(bus.address, `/org/vmkeeper1/machine/${name}`, MACHINE, p)).data;
const states = async () => Object.fromEntries(await Promise.all(Object.keys(MACHINES).map(async (n) => [n, await machineProp(n, 'State')] as const)));
const events = async (after = 0) => ((await call('ListEventsSince', 'ts', [after, ''])).data as [EventRow[], number])[0];
const lastSequence = async () => ((await call('ListEventsSince', 'ts', [0, ''])).data as [EventRow[], number])[1];

beforeAll(async () => {
  bus = await startSystemBus();
  dir = await mkdtemp(path.join(os.tmpdir(), 'vmkeeper-drain-'));
  await mkdir(path.join(dir, 'images'));
  await writeFile(path.join(dir, 'node.xml'), '<node/>');
  await writeFile(path.join(dir, 'config.yaml'), CONFIG);
  opts = { busAddress: bus.address, stateDir: path.join(dir, 'state'), imageDir: path.join(dir, 'images'), libvirtUri: `test://${dir}/node.xml`, configFile: path.join(dir, 'config.yaml') };
  agent = await startAgent(opts);
  for (const [name, o] of Object.entries(MACHINES)) await call('CreateMachine', 'ss', [name, spec(o)]);
  await waitFor(async () => Object.values(await states()).every((s) => s === 'running'), { timeoutMs: 20_000, what: 'every machine running' });
}, 60_000);

afterAll(async () => {
  await agent?.stop();
  await bus?.stop();
  await rm(dir, { recursive: true, force: true });
});

describe('drain and undrain on the libvirt test driver', () => {
  let drainStartedAt = 0;

  it('Drain stops the groups in priority order, each machine by its action, then DrainCompleted', async () => {
    drainStartedAt = await lastSequence();
    await call('Drain');
    expect(JSON.parse(await readFile(drainStateFile(opts.stateDir), 'utf8'))).toMatchObject({ state: expect.stringMatching(/^drain(ing|ed)$/) });
    await waitFor(async () => (await drainState()) === 'drained', { timeoutMs: 60_000, what: 'DrainState drained' });
    const seen = (await events(drainStartedAt)).map((e) => `${e[2] || '(host)'} ${e[4]}`);
    const firstOf = (entry: string) => seen.indexOf(entry);
    expect(seen[0]).toBe('(host) DrainStarted');
    expect(seen.at(-1)).toBe('(host) DrainCompleted');
    expect(firstOf('db Saved')).toBeGreaterThan(0);
    expect(firstOf('app ShutdownCompleted')).toBeGreaterThan(firstOf('db Saved'));
    expect(firstOf('cache ForceStopped')).toBeGreaterThan(firstOf('app ShutdownCompleted'));
    // The states follow at the next poll of libvirt.
    await waitFor(async () => Object.values(await states()).every((st) => st === 'stopped'), { timeoutMs: 10_000, what: 'every machine stopped' });
    for (const name of Object.keys(MACHINES)) expect(await machineProp(name, 'Power')).toBe('on');
  }, 90_000);

  it('ListShutdownRecords shows the drain, DescribeShutdownRecord each machine\'s result', async () => {
    const [rows] = (await call('ListShutdownRecords')).data as [Array<[string, string, string, number, number]>];
    const drain = rows.filter((r) => r[1] === 'drain').at(-1)!;
    expect(drain).toBeDefined();
    expect(drain[2]).toBe('completed');
    expect(drain[4]).toBeGreaterThanOrEqual(drain[3]);
    const [json] = (await call('DescribeShutdownRecord', 's', [drain[0]])).data as [string];
    const record = JSON.parse(json) as { machines: Array<{ machine: string; result: string; group: number }> };
    const byName = Object.fromEntries(record.machines.map((m) => [m.machine, m]));
    expect(byName.db).toMatchObject({ result: 'saved', group: 0 });
    expect(byName.app).toMatchObject({ result: 'clean', group: 1 });
    expect(byName.cache).toMatchObject({ result: 'forced', group: 2 });
  });

  it('nothing starts while drained, also across a restart of the agent', async () => {
    await agent.stop();
    agent = await startAgent(opts);
    expect(await drainState()).toBe('drained');
    // Several resyncs (1 s each) pass: every machine stays stopped, and says why.
    const until = Date.now() + 4000;
    while (Date.now() < until) {
      expect(Object.values(await states())).toEqual(['stopped', 'stopped', 'stopped']);
      await new Promise((r) => setTimeout(r, 250));
    }
  }, 60_000);

  it('Undrain brings the guests back in start-priority order, then Undrained', async () => {
    const before = await lastSequence();
    await call('Undrain');
    expect(await drainState()).toBe('none');
    await waitFor(async () => Object.values(await states()).every((s) => s === 'running'), { timeoutMs: 30_000, what: 'every machine running again' });
    const seen = (await events(before)).map((e) => `${e[2] || '(host)'} ${e[4]}`);
    expect(seen[0]).toBe('(host) Undrained');
    const started = seen.filter((e) => / (Started|Restored)$/.test(e)).map((e) => e.split(' ')[0]);
    expect(started).toEqual(['cache', 'app', 'db']);
    await expect(readFile(drainStateFile(opts.stateDir))).rejects.toThrow(/ENOENT/);
  }, 60_000);
});
