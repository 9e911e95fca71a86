import { readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeMachines } from '../../../bench/fixtures.js';
import { busctlCall } from '../../support/busctl.js';
import { spawnAgent, type AgentProcess } from '../../support/agent-process.js';
import { startSessionBus, type PrivateBus } from '../../support/dbus-daemon.js';
import { waitFor } from '../../support/wait.js';

// Issue 12 with many machines on the real agent, test driver and a private dbus-daemon. Bounds
// are about ten times the figures of bench/scale.bench.ts (docs/performance.md): they catch a
// poll or resync that costs per unchanged machine again, or reads held back by the first reconcile.

const COUNT = 2_000;
let dir: string;
let bus: PrivateBus;
let agent: AgentProcess | undefined;
let spawnOnce: (level?: string) => AgentProcess;

/** utime + stime of a process in seconds (USER_HZ = 100). */
function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(f[11]) + Number(f[12])) / 100;
}

/** The share of a core the process used over the next `ms`. */
async function cpuShareOver(pid: number, ms: number): Promise<number> {
  const c0 = cpuSeconds(pid);
  await new Promise((r) => setTimeout(r, ms)); // a measurement window, not a wait for a state
  return (cpuSeconds(pid) - c0) / (ms / 1000);
}

const getMachine = (name: string) => busctlCall(bus.address, '/org/vmkeeper1', 'org.vmkeeper1.Manager', 'GetMachine', 's', [name]);
const describeMachine = (name: string) => busctlCall(bus.address, '/org/vmkeeper1', 'org.vmkeeper1.Manager', 'DescribeMachine', 's', [name]);

beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'vmk-scale-test-'));
  const { stateDir, imageDir, uri } = await writeMachines(dir, COUNT);
  bus = await startSessionBus();
  const configFile = path.join(dir, 'config.yaml');
  await writeFile(configFile, 'log:\n  level: warn\n');
  spawnOnce = (level = 'warn') => spawnAgent({ busAddress: bus.address, stateDir, imageDir, libvirtUri: uri, configFile, extraArgs: ['--log-level', level] });
  agent = spawnOnce();
  await agent.ready(120_000);
}, 180_000);

afterAll(async () => {
  await agent?.stop();
  await bus?.stop();
  await rm(dir, { recursive: true, force: true });
});

describe(`agent with ${COUNT} machines`, () => {
  it('idles under 20% of a core (poll and resync do nothing for unchanged machines)', async () => {
    const pid = agent!.child.pid!;
    // Records and domains agree from the start (both stopped), so no state change marks the end of
    // the start-up reconcile: wait for the agent to go quiet (a 5 s window under the bound) first.
    expect(/"state\\?":\\?"stopped/.test(JSON.stringify(await describeMachine(`vm-${String(COUNT - 1).padStart(5, '0')}`)))).toBe(true);
    await waitFor(async () => (await cpuShareOver(pid, 5_000)) < 0.2, { timeoutMs: 60_000, intervalMs: 0, what: 'the start-up reconcile to finish (CPU under 20%)' });
    const cpu0 = cpuSeconds(pid);
    const t0 = Date.now();
    // A measurement window, not a wait for a state: 35 s spans one resync (30 s) and 35 polls.
    await new Promise((r) => setTimeout(r, 35_000));
    const share = (cpuSeconds(pid) - cpu0) / ((Date.now() - t0) / 1000);
    expect(share).toBeLessThan(0.2);
  }, 120_000);

  it('answers GetMachine within 20 s of a restart, the records taken from the snapshot of the clean stop', async () => {
    await agent!.stop();
    const t0 = Date.now();
    agent = spawnOnce('info');
    await waitFor(() => getMachine('vm-00000').then(() => true, () => false), { timeoutMs: 60_000, intervalMs: 50, what: 'the first GetMachine after a restart' });
    expect(Date.now() - t0).toBeLessThan(20_000);
    // Records and domains agree, so the agent wrote no record before its stop: every file is as
    // the snapshot saw it (a few could miss it only if a write raced the stop).
    const loaded = /loaded (\d+) machine records from .* \((\d+) unchanged since the last clean stop/.exec(agent!.output());
    expect(loaded, agent!.output().slice(0, 2000)).not.toBeNull();
    expect(Number(loaded![1])).toBe(COUNT);
    expect(Number(loaded![2])).toBeGreaterThan(COUNT - 10);
  }, 120_000);
});

describe(`agent with ${COUNT} machines on test:///default (domain events)`, () => {
  let eventsDir: string;
  let eventsBus: PrivateBus | undefined;
  let eventsAgent: AgentProcess | undefined;

  afterAll(async () => {
    await eventsAgent?.stop();
    await eventsBus?.stop();
    if (eventsDir) await rm(eventsDir, { recursive: true, force: true });
  });

  it('follows libvirt domain events instead of polling, and idles under 20% of a core', async () => {
    eventsDir = await mkdtemp(path.join(os.tmpdir(), 'vmk-scale-events-'));
    // test:///default starts empty in the agent's process: the agent defines every domain first.
    const { stateDir, imageDir } = await writeMachines(eventsDir, COUNT);
    eventsBus = await startSessionBus();
    eventsAgent = spawnAgent({ busAddress: eventsBus.address, stateDir, imageDir, libvirtUri: 'test:///default', extraArgs: ['--log-level', 'info'] });
    await eventsAgent.ready(120_000);
    await waitFor(() => eventsAgent!.output().includes('following libvirt domain events'), { timeoutMs: 30_000, what: 'the log line "following libvirt domain events"' });
    expect(eventsAgent.output()).not.toContain('domain events are unavailable');
    const pid = eventsAgent.child.pid!;
    await waitFor(async () => (await cpuShareOver(pid, 5_000)) < 0.2, { timeoutMs: 90_000, intervalMs: 0, what: `the ${COUNT} defines to finish (CPU under 20%)` });
    const cpu0 = cpuSeconds(pid);
    const t0 = Date.now();
    // A measurement window, not a wait for a state: 35 s spans one resync (30 s).
    await new Promise((r) => setTimeout(r, 35_000));
    expect((cpuSeconds(pid) - cpu0) / ((Date.now() - t0) / 1000)).toBeLessThan(0.2);
  }, 240_000);
});
