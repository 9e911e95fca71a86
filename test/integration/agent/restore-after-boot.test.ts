import { randomUUID } from 'node:crypto';
import { access, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { settledRecord, writeRecordFiles } from '../../../bench/fixtures.js';
import { LibvirtHypervisor } from '../../../src/hypervisor/libvirt/libvirt-hypervisor.js';
import { systemClock } from '../../../src/lifecycle/clock.js';
import { silentLogger } from '../../../src/logging/logger.js';
import { newStatus } from '../../../src/machine/record.js';
import { machineDataDir, recordsDir, savedStateFile, serialLogFile } from '../../../src/machine/paths.js';
import { busctlCall } from '../../support/busctl.js';
import { startAgent, type AgentProcess } from '../../support/agent-process.js';
import { startSessionBus, type PrivateBus } from '../../support/dbus-daemon.js';
import { waitFor } from '../../support/wait.js';

// Restore after boot through the real agent on libvirt's test driver: records that say power on
// while every domain is off (the host came back), one guest with a saved state made by
// saveDomain. The agent starts them in startPriority order, one at a time, 1 s apart.

const MACHINES = [
  { name: 'alpha', startPriority: 100 },
  { name: 'bravo', startPriority: 900 }, // saved
  { name: 'charlie', startPriority: 500 },
  { name: 'delta', startPriority: 0 },
  { name: 'echo', startPriority: 1000, power: 'off' as const }, // powered off by its owner: stays off
];
const DELAY_SEC = 1;

let dir: string;
let stateDir: string;
let bus: PrivateBus;
let agent: AgentProcess | undefined;

type EventRow = [number, string, string, string, string];
const manager = (method: string, sig = '', args: string[] = []) => busctlCall(bus.address, '/org/vmkeeper1', 'org.vmkeeper1.Manager', method, sig, args);
const listMachines = async () => ((await manager('ListMachines')).data as [Array<[string, string, string, string]>])[0];
const listEvents = async () => ((await manager('ListEvents')).data as [EventRow[]])[0];

beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'vmk-restore-'));
  stateDir = path.join(dir, 'state');
  const imageDir = path.join(dir, 'images');
  await mkdir(imageDir, { recursive: true });
  await writeFile(path.join(imageDir, 'vmlinuz'), '');
  const records = MACHINES.map((m) =>
    settledRecord(m.name, randomUUID(), {
      annotations: {},
      spec: { cpus: 1, memoryMiB: 64, domainType: 'qemu', boot: { kernel: `${imageDir}/vmlinuz` }, disks: [], nics: [], power: m.power ?? 'on', startPriority: m.startPriority },
      // What the records said when the host went down.
      status: { ...newStatus(), state: m.power === 'off' ? 'stopped' : 'running' },
    }),
  );
  await writeRecordFiles(recordsDir(stateDir), records);
  // The test driver keeps its domains per connection: the agent's starts empty and defines them
  // from the records, as after a host whose libvirt lost its definitions.
  const nodeXml = path.join(dir, 'node.xml');
  await writeFile(nodeXml, '<node/>');
  const uri = `test://${nodeXml}`;

  // bravo's memory, saved by saveDomain as a "save" host shutdown does, on a connection of its
  // own: the file is what outlives it.
  const bravo = records.find((r) => r.name === 'bravo')!;
  const hv = new LibvirtHypervisor({ uri, callTimeoutMs: 10_000, logger: silentLogger, clock: systemClock });
  try {
    await mkdir(machineDataDir(stateDir, 'bravo'), { recursive: true });
    await hv.defineDomain({
      domainName: bravo.domainName,
      uuid: bravo.uuid,
      machineName: 'bravo',
      domainType: 'qemu',
      cpus: 1,
      memoryMiB: 64,
      boot: { kernel: `${imageDir}/vmlinuz` },
      diskFiles: [],
      nics: [],
      serialLogFile: serialLogFile(stateDir, 'bravo'),
      createdAt: bravo.createdAt,
    });
    await hv.startDomain(bravo.domainName);
    await hv.saveDomain(bravo.domainName, savedStateFile(stateDir, 'bravo'), 10_000);
  } finally {
    await hv.close();
  }

  const configFile = path.join(dir, 'config.yaml');
  await writeFile(configFile, `restore:\n  parallelism: 1\n  delaySec: ${DELAY_SEC}\n`);
  bus = await startSessionBus();
  agent = await startAgent({ busAddress: bus.address, stateDir, imageDir, libvirtUri: uri, configFile });
}, 60_000);

afterAll(async () => {
  await agent?.stop();
  await bus?.stop();
  await rm(dir, { recursive: true, force: true });
});

describe('restore after boot on the libvirt test driver', () => {
  it('starts the machines whose power is on in startPriority order, resumes the saved one, leaves the powered-off one off', async () => {
    // Not "four machines running": the records say running from before the host went down until
    // the agent has looked. Four starts recorded is the end of the restore.
    const startsOf = async () => (await listEvents()).filter((e) => e[3] === 'Started' || e[3] === 'Restored');
    const events = await waitFor(async () => ((await startsOf()).length >= 4 ? startsOf() : undefined), { timeoutMs: 30_000, what: 'four starts recorded' }).catch(async (err: Error) => {
      throw new Error(`${err.message}\n${JSON.stringify(await listMachines())}\n${JSON.stringify(await listEvents())}\n${agent!.output().slice(-3000)}`);
    });
    expect(events.map((e) => `${e[1]}:${e[3]}`)).toEqual(['bravo:Restored', 'charlie:Started', 'alpha:Started', 'delta:Started']);
    await waitFor(async () => (await listMachines()).filter((m) => m[1] === 'running').length === 4, { timeoutMs: 10_000, what: 'four machines running' });
    // Spaced by delaySec (begin to begin; each event lands when its start returned). Wide margin above.
    for (let i = 1; i < events.length; i++) {
      const gapMs = (events[i][0] - events[i - 1][0]) / 1000;
      expect(gapMs).toBeGreaterThanOrEqual(DELAY_SEC * 1000 - 250);
      expect(gapMs).toBeLessThan(DELAY_SEC * 1000 + 5000);
    }
    expect((await listMachines()).find((m) => m[0] === 'echo')).toEqual(['echo', 'stopped', 'off', expect.any(String)]);
    await expect(access(savedStateFile(stateDir, 'bravo'))).rejects.toThrow(/ENOENT/); // deleted once restored
    expect((await listEvents()).filter((e) => e[2] === 'warning')).toEqual([]);
  }, 60_000);
});
