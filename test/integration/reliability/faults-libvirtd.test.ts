import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import type { MessageBus } from 'dbus-next';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AgentProcess, AgentProcessOptions } from '../../support/agent-process.js';
import { virsh, type PrivateLibvirtd } from '../../support/libvirtd.js';
import { waitFor } from '../../support/wait.js';
import { isRoot, listMachines, machineProp, manager, managerProp, startRig, startTestLibvirtd, type Rig } from './helpers.js';

// Fault injection against a private real libvirtd (qemu driver; machines stay powered off, so no
// guest boots): libvirtd stopped and started again, and libvirtd frozen with SIGSTOP. In both the
// agent must report `degraded`, keep answering D-Bus, lose nothing, and catch up afterwards.

const CALL_TIMEOUT_SEC = 1;
// The agent's default libuv pool (4 threads). The unit file raises it to 16; the default makes a
// leak of stuck libvirt calls into the pool visible sooner.
const POOL = 4;

let rig: Rig;
let libvirtd: PrivateLibvirtd;
let client: MessageBus;
let opts: AgentProcessOptions;
let agent: AgentProcess;

const SPEC = JSON.stringify({ cpus: 1, memoryMiB: 64, domainType: 'qemu', disks: [{ name: 'root', sizeGiB: 1 }], power: 'off', gracePeriodSec: 5 });

async function ok(member: string, sig: string, body: unknown[], maxMs = 5000): Promise<unknown[]> {
  const r = await manager(client, member, sig, body, maxMs);
  if (!r.ok) throw new Error(`${member}(${JSON.stringify(body)}): ${r.errorName}: ${r.message}\n${agent.output().slice(-2000)}`);
  return r.body;
}
const state = (name: string) => machineProp(client, name, 'State', 5000);
const domains = async () => (await virsh(libvirtd.uri, ['list', '--all', '--name'])).stdout.split('\n').map((s) => s.trim()).filter(Boolean);
const readRecordFile = async (name: string) => JSON.parse(await readFile(path.join(opts.stateDir, 'machines', `${name}.json`), 'utf8')) as Record<string, any>;
/** Record files trail the journal by up to the store's file lag (100 ms), so wait for the file to show `what`. */
const recordFileShows = (name: string, test: (record: Record<string, any>) => boolean, what: string) =>
  waitFor(async () => test(await readRecordFile(name).catch(() => ({}))), { timeoutMs: 5000, intervalMs: 20, what: `machines/${name}.json: ${what}` });
async function expectGone(name: string): Promise<void> {
  expect((await listMachines(client)).map((m) => m[0])).not.toContain(name);
  expect(await domains()).not.toContain(`vmkeeper-${name}`);
  expect(await readdir(path.join(opts.stateDir, 'guests'))).not.toContain(name);
  await waitFor(async () => !(await readdir(path.join(opts.stateDir, 'machines'))).includes(`${name}.json`), { timeoutMs: 5000, what: `machines/${name}.json removed` });
}

/** While `until` is false, D-Bus must answer every read within a wide margin; returns the worst latency. */
async function probeResponsive(until: () => Promise<boolean>, timeoutMs: number): Promise<number> {
  let worst = 0;
  await waitFor(
    async () => {
      const r = await manager(client, 'ListMachines', '', [], 5000);
      if (!r.ok) throw new Error(`ListMachines failed while libvirt is down: ${r.errorName}`);
      worst = Math.max(worst, r.ms);
      return until();
    },
    { timeoutMs, intervalMs: 200, what: 'the fault to show' },
  );
  return worst;
}

describe.skipIf(!isRoot)('fault injection: libvirtd', () => {
  beforeAll(async () => {
    rig = await startRig({
      prefix: 'vmk-flt-',
      libvirtd: true,
      config: { callTimeoutSec: CALL_TIMEOUT_SEC, pollIntervalMs: 200, sweepIntervalSec: 1, resyncIntervalSec: 2 },
      prepare: async () => ({ env: { UV_THREADPOOL_SIZE: String(POOL) } }),
    });
    ({ opts, client } = rig);
    agent = rig.agent!;
    libvirtd = rig.libvirtd!;
    for (const n of ['a', 'b', 'c', 'd']) await ok('CreateMachine', 'ss', [n, SPEC]);
    await waitFor(async () => (await listMachines(client)).every((m) => m[1] === 'stopped'), { timeoutMs: 30_000, what: 'machines defined and stopped' });
  }, 180_000);

  afterAll(async () => {
    if (libvirtd) {
      try {
        process.kill(libvirtd.pid, 'SIGCONT');
      } catch {
        /* gone */
      }
    }
    await rig?.stop();
  });

  it('libvirtd stopped: degraded, D-Bus keeps answering, reconnects and finishes pending deletions', async () => {
    await libvirtd.stop();
    const worst = await probeResponsive(async () => (await managerProp(client, 'State')) === 'degraded', 30_000);
    expect(await managerProp(client, 'LibvirtConnected')).toBe(false);
    expect(worst).toBeLessThan(5000);
    // Work accepted while libvirt is away is stored, not lost.
    await ok('DeleteMachineWithGracePeriod', 'su', ['a', 0]);
    await ok('CreateMachine', 'ss', ['e', SPEC]);
    await ok('SetMachineAnnotations', 'sa{ss}', ['b', { during: 'outage' }]);
    await recordFileShows('a', (r) => r.deletionTimestamp > 0, 'a deletion timestamp');
    await recordFileShows('e', (r) => r.name === 'e', 'the record');
    expect(await state('a')).toBe('terminating');
    expect(await managerProp(client, 'State')).toBe('degraded');

    libvirtd = rig.libvirtd = await startTestLibvirtd(rig.dir);
    await waitFor(async () => (await managerProp(client, 'State')) === 'running', { timeoutMs: 30_000, what: 'State running again' });
    expect(await managerProp(client, 'LibvirtConnected')).toBe(true);
    await waitFor(async () => !(await listMachines(client)).some((m) => m[0] === 'a'), { timeoutMs: 30_000, what: 'the pending deletion to finish' });
    await expectGone('a');
    await waitFor(async () => (await state('e')) === 'stopped', { timeoutMs: 30_000, what: 'e defined after the outage' });
    expect(await domains()).toEqual(expect.arrayContaining(['vmkeeper-b', 'vmkeeper-c', 'vmkeeper-d', 'vmkeeper-e']));
    expect(await machineProp(client, 'b', 'Annotations')).toEqual({ during: 'outage' });
  }, 120_000);

  it('libvirtd frozen (SIGSTOP): calls time out, D-Bus stays responsive, nothing is lost, recovery after SIGCONT', async () => {
    process.kill(libvirtd.pid, 'SIGSTOP');
    try {
      const worst = await probeResponsive(async () => (await managerProp(client, 'State')) === 'degraded', 30_000);
      expect(worst).toBeLessThan(5000);
      expect(await managerProp(client, 'LibvirtConnected')).toBe(false);
      // Stay frozen long enough for the agent to give up on well over POOL libvirt calls: stuck
      // native calls must not use up the thread pool that file writes need.
      const frozenUntil = Date.now() + (POOL + 4) * (CALL_TIMEOUT_SEC * 1000 + 400);
      let i = 0;
      const latencies: number[] = [];
      while (Date.now() < frozenUntil) {
        const name = `f${i++}`;
        const r = await manager(client, 'CreateMachine', 'ss', [name, SPEC], 10_000);
        expect(r.ok ? 'ok' : `${r.errorName}: ${r.message}`, `CreateMachine ${name} while libvirtd is frozen\n${agent.output().slice(-6000)}`).toBe('ok');
        latencies.push(r.ms);
        await recordFileShows(name, (r) => r.name === name, 'the record');
        await new Promise((resolve) => setTimeout(resolve, 300)); // pacing only, not synchronisation
      }
      expect(Math.max(...latencies)).toBeLessThan(5000);
      await ok('DeleteMachine', 's', ['c']);
      await ok('SetMachinePower', 'ss', ['d', 'on']).then(() => ok('SetMachinePower', 'ss', ['d', 'off']));
      await recordFileShows('c', (r) => r.deletionTimestamp > 0, 'a deletion timestamp');
      console.log(`libvirtd frozen: ${i} creates answered, worst ${Math.max(...latencies).toFixed(0)} ms, worst read ${worst.toFixed(0)} ms`);
    } finally {
      process.kill(libvirtd.pid, 'SIGCONT');
    }
    await waitFor(async () => (await managerProp(client, 'State')) === 'running', { timeoutMs: 60_000, what: 'State running after SIGCONT' });
    await waitFor(async () => !(await listMachines(client)).some((m) => m[0] === 'c'), { timeoutMs: 60_000, what: 'c deleted after SIGCONT' });
    await expectGone('c');
    await waitFor(async () => (await listMachines(client)).every((m) => m[1] === 'stopped'), { timeoutMs: 60_000, what: 'every machine defined and stopped' });
    const names = (await listMachines(client)).map((m) => m[0]);
    for (const n of names) expect(await domains()).toContain(`vmkeeper-${n}`);
    expect(agent.child.exitCode).toBeNull();
  }, 180_000);
});
