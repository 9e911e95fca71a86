import { mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { busctlCall, busctlGetProperty } from '../../support/busctl.js';
import { PROJECT_ROOT, startSystemBus, type PrivateBus } from '../../support/dbus-daemon.js';
import { startAgent, type AgentProcess, type AgentProcessOptions } from '../../support/agent-process.js';
import { waitFor } from '../../support/wait.js';

// The real agent on libvirt's test driver, stopped with hostShutdown.onServiceStop "shutdown":
// the stop procedure runs its groups, the save-action guest is saved to its file, and the
// shutdown record on disk says what became of each guest, also for the agent started again.

const MANAGER = ['/org/vmkeeper1', 'org.vmkeeper1.Manager'] as const;
const spec = (lifecycle: object) => JSON.stringify({ cpus: 1, memoryMiB: 128, disks: [{ name: 'root', sizeGiB: 1 }], ...lifecycle });

let bus: PrivateBus;
let dir: string;
let opts: AgentProcessOptions;
let agent: AgentProcess | undefined;

beforeAll(async () => {
  bus = await startSystemBus();
  dir = await mkdtemp(path.join(os.tmpdir(), 'vmkeeper-stop-record-'));
  await mkdir(path.join(dir, 'images'));
  await writeFile(path.join(dir, 'node.xml'), '<node/>');
  const config = (await readFile(path.join(PROJECT_ROOT, 'config/config.yaml'), 'utf8'))
    .replace(/^  onServiceStop: leave$/m, '  onServiceStop: shutdown')
    .replace(/^  groups: \[\]$/m, '  groups: [{minPriority: 500, budgetSec: 20}, {minPriority: 0, budgetSec: 20}]');
  expect(config).toMatch(/onServiceStop: shutdown/);
  expect(config).toMatch(/minPriority: 500/);
  await writeFile(path.join(dir, 'config.yaml'), config);
  opts = { busAddress: bus.address, stateDir: path.join(dir, 'state'), imageDir: path.join(dir, 'images'), libvirtUri: `test://${dir}/node.xml`, configFile: path.join(dir, 'config.yaml') };
  agent = await startAgent(opts);
}, 60_000);

afterAll(async () => {
  await agent?.stop();
  await bus?.stop();
  await rm(dir, { recursive: true, force: true });
});

describe('stop procedure on the libvirt test driver', () => {
  it('saves the save-action guest to its file and writes the shutdown record', async () => {
    const machines = { keep: { hostShutdownAction: 'save', shutdownPriority: 800 }, plain: {}, hard: { hostShutdownAction: 'force' } };
    for (const [name, lifecycle] of Object.entries(machines)) {
      await busctlCall(bus.address, ...MANAGER, 'CreateMachine', 'ss', [name, spec(lifecycle)]);
    }
    for (const name of Object.keys(machines)) {
      await waitFor(async () => (await busctlGetProperty(bus.address, `/org/vmkeeper1/machine/${name}`, 'org.vmkeeper1.Machine', 'State')).data === 'running',
        { timeoutMs: 15_000, what: `${name} running` });
    }
    const stopped = await agent!.stop();
    const output = agent!.output();
    agent = undefined;
    expect(stopped.code, output).toBe(0);
    expect(output).toMatch(/service stop: group 1\/2 \(priority >= 500, budget 20s\): keep \(save\)/);
    expect(output).toMatch(/stopped: 1 shut down cleanly, 1 saved, 1 destroyed, 0 failed, 0 left running/);

    const saved = path.join(opts.stateDir, 'guests/keep/saved-state');
    expect((await stat(saved)).size).toBeGreaterThan(0);
    const files = await readdir(path.join(opts.stateDir, 'shutdowns'));
    expect(files).toHaveLength(1);
    const record = JSON.parse(await readFile(path.join(opts.stateDir, 'shutdowns', files[0]!), 'utf8'));
    expect(files[0]).toBe(`${record.id}.json`);
    expect(record).toMatchObject({ kind: 'service-stop', result: 'completed', boundSec: 120 });
    expect(record.finishedAt).toBeGreaterThanOrEqual(record.startedAt);
    expect(record.groups.map((g: { minPriority: number }) => g.minPriority)).toEqual([500, 0]);
    expect(record.machines.map((m: Record<string, unknown>) => [m.machine, m.action, m.group, m.result])).toEqual([
      ['keep', 'save', 0, 'saved'],
      ['hard', 'force', 1, 'forced'],
      ['plain', 'shutdown', 1, 'clean'],
    ]);
    expect(record.machines[0].detail).toMatch(/^saved to .*guests\/keep\/saved-state in \d+\.\ds$/);

    // Started again, the agent reads the record as it was (not "interrupted").
    agent = await startAgent(opts);
    await agent.stop();
    expect(agent.output()).not.toMatch(/interrupted|unreadable shutdown records/);
    agent = undefined;
    expect(JSON.parse(await readFile(path.join(opts.stateDir, 'shutdowns', files[0]!), 'utf8')).result).toBe('completed');
  }, 90_000);
});
