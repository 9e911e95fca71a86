// Issue 12 in one run: the real agent (test driver, 10,000 machines, private dbus-daemon) is
// started, stopped and started again on the same state, then every figure is printed in one table
// against its goal, with the bus round trip and the load average taken in the same run.
// Run: npx tsx bench/scale.bench.ts [count=10000]   (env VMKEEPER_SCALE_IDLE_SEC, default 30;
//   VMKEEPER_BENCH_DOMAINS=default: domains in test:///default, with domain events;
//   VMKEEPER_SCALE_HEAP_DIR=<dir>: a heap snapshot of the agent, written there once it is idle
//   again after the writes, to see what the reads and writes leave behind)
import { mkdtemp, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { connectBus } from '../src/dbus/bus-address.js';
import { busctlCall } from '../test/support/busctl.js';
import { spawnAgent, type AgentProcess } from '../test/support/agent-process.js';
import { startSessionBus } from '../test/support/dbus-daemon.js';
import { percentile } from './common.js';
import { busctlSetUp, getId, managedObjectsTimes, mgr, readsUnderWrites, timeCalls } from './dbus-latency.bench.js';
import { BENCH_DOMAINS, agentFormText, benchAgentForm, benchFromSource, buildAgentOnce, notifyReceiver, recordsFromSnapshot, requireDomainEvents, settleAfterDefines, writeMachines } from './fixtures.js';
import { heapSnapshot, heapSnapshotNodeArgs } from './heap-snapshot.js';
import { cpuSeconds, rssKiB } from './load-run.js';

const IDLE_SEC = Number(process.env.VMKEEPER_SCALE_IDLE_SEC ?? 30);
const SETTLE_MS = 10_000;
const IDLE_AGAIN_SEC = 90;
const HEAP_DIR = process.env.VMKEEPER_SCALE_HEAP_DIR;
const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));
const loadAvg = () => os.loadavg().map((l) => l.toFixed(2)).join(' ');

/** goal: the value must stay below it; atLeast: the value must reach it. */
interface Row { what: string; value: number; unit: string; goal?: number; atLeast?: number }

async function firstAnswer(address: string, t0: number): Promise<number> {
  for (;;) {
    const ok = await busctlCall(address, '/org/vmkeeper1', 'org.vmkeeper1.Manager', 'GetMachine', 's', ['vm-00000']).then(() => true, () => false);
    if (ok) return Date.now() - t0;
    if (Date.now() - t0 > 300_000) throw new Error('no GetMachine answer within 300 s');
  }
}

export async function scaleBench(count = 10_000): Promise<string[]> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'vmk-scale-'));
  const written = await writeMachines(dir, count);
  const { stateDir, imageDir } = written;
  // test:///default (VMKEEPER_BENCH_DOMAINS=default) has domain events, but starts empty at each
  // start: the agent defines every domain again in the background after the restart.
  const uri = BENCH_DOMAINS === 'default' ? 'test:///default' : written.uri;
  const bus = await startSessionBus();
  const configFile = path.join(dir, 'config.yaml');
  await writeFile(configFile, 'log:\n  level: warn\n');
  await buildAgentOnce();
  const form = benchAgentForm();
  // The agent writes a snapshot into its working directory on SIGUSR2; the bench sends it at the end.
  if (HEAP_DIR) form.nodeArgs = [...form.nodeArgs, ...heapSnapshotNodeArgs(HEAP_DIR)];
  // The measured restart logs at info: its "loaded ... machine records" line says how many came from the snapshot.
  const spawnOnce = (env: NodeJS.ProcessEnv = {}, level = 'warn') =>
    spawnAgent({ busAddress: bus.address, stateDir, imageDir, libvirtUri: uri, configFile, extraArgs: ['--log-level', level], built: form.built, env: { ...form.env, ...env }, nodeArgs: form.nodeArgs });
  const rows: Row[] = [];
  const loadAtStart = loadAvg();
  let agent: AgentProcess | undefined;
  try {
    // The first start settles the state (and warms the page cache): the restart is what is measured.
    agent = spawnOnce();
    await agent.ready(300_000);
    await agent.stop();
    const sock = path.join(dir, 'notify.sock');
    const receiver = notifyReceiver(sock);
    await receiver.listening;
    const t0 = Date.now();
    agent = spawnOnce({ NOTIFY_SOCKET: sock }, 'info');
    rows.push({ what: 'first GetMachine after restart', value: await firstAnswer(bus.address, t0), unit: 'ms', goal: 2000 });
    rows.push({ what: 'restart to READY=1', value: (await receiver.ready) - t0, unit: 'ms' });
    rows.push({ what: 'records taken from the snapshot at the restart', value: recordsFromSnapshot(agent), unit: '' });
    receiver.stop();

    const client = await connectBus(bus.address);
    client.on('error', () => {});
    const pid = agent.child.pid!;
    if (BENCH_DOMAINS === 'default') await settleAfterDefines(pid);
    else await pause(SETTLE_MS);
    requireDomainEvents(agent);
    const cpu0 = cpuSeconds(pid);
    const w0 = Date.now();
    await pause(IDLE_SEC * 1000);
    const idle = (cpuSeconds(pid) - cpu0) / ((Date.now() - w0) / 1000);
    rows.push({ what: `idle CPU over ${IDLE_SEC} s (% of a core)`, value: idle * 100, unit: '%', goal: 2 });
    rows.push({ what: 'RSS idle', value: rssKiB(pid) / 1024, unit: 'MiB', goal: 200 });

    const ping = await timeCalls(client, 200, getId);
    rows.push({ what: 'bus round trip GetId p50', value: percentile(ping, 50), unit: 'ms' });
    const list = await timeCalls(client, 50, () => mgr('ListMachines'));
    rows.push({ what: 'ListMachines p50', value: percentile(list, 50), unit: 'ms', goal: 50 });
    rows.push({ what: 'ListMachines p99', value: percentile(list, 99), unit: 'ms' });
    for (const { what, p50 } of await managedObjectsTimes(bus.address, client, 10, await busctlSetUp(bus.address, 10))) {
      rows.push({ what: `GetManagedObjects p50 (${what})`, value: p50, unit: 'ms', goal: 500 });
    }
    const { reads, writesPerSec } = await readsUnderWrites(bus.address, client, 500, count);
    rows.push({ what: 'GetMachine p50, 8 writers', value: percentile(reads, 50), unit: 'ms' });
    rows.push({ what: 'GetMachine p99, 8 writers', value: percentile(reads, 99), unit: 'ms', goal: 20 });
    rows.push({ what: 'acknowledged writes/s (8 writers)', value: writesPerSec, unit: '/s', atLeast: 2000 });
    rows.push({ what: 'RSS right after the reads and writes', value: rssKiB(pid) / 1024, unit: 'MiB' });
    // V8 gives back the heap a burst grew once allocation has been low for a while (its memory
    // reducer, about 30 s here): the idle goal is measured again once the agent is idle again.
    // Sampled, not read once: when the reducer runs varies (about 30 s after a burst of writes alone).
    const after: number[] = [];
    for (let t = 0; t < IDLE_AGAIN_SEC; t += 5) {
      await pause(5000); // a sampling interval, not a wait for a state
      after.push(rssKiB(pid) / 1024);
    }
    rows.push({ what: 'RSS after the writes, highest of 5 s samples', value: Math.max(...after), unit: 'MiB' });
    rows.push({ what: `RSS idle again, ${IDLE_AGAIN_SEC} s after the writes`, value: after.at(-1)!, unit: 'MiB', goal: 200 });
    if (HEAP_DIR) {
      const file = await heapSnapshot(pid, HEAP_DIR);
      console.log(`heap snapshot: ${file} (${((await stat(file)).size / 1048576).toFixed(0)} MiB)`);
    }
    client.disconnect();

    // What `systemctl restart` after a busy spell costs: the stop checkpoints what the writes
    // journalled, and the next start should find nothing to replay.
    const s0 = Date.now();
    await agent.stop();
    rows.push({ what: 'stop after the writes (SIGTERM to exit)', value: Date.now() - s0, unit: 'ms' });
    const t1 = Date.now();
    agent = spawnOnce({}, 'info');
    rows.push({ what: 'first GetMachine after a restart that follows the writes', value: await firstAnswer(bus.address, t1), unit: 'ms', goal: 2000 });
    rows.push({ what: 'records taken from the snapshot at that restart', value: recordsFromSnapshot(agent), unit: '' });
  } finally {
    await agent?.stop();
    await bus.stop();
    await rm(dir, { recursive: true, force: true });
  }
  const lines = [`${count} machines (test driver, ${BENCH_DOMAINS === 'default' ? 'test:///default with domain events' : 'node file, polled'}, agent ${benchFromSource ? 'from source through tsx' : 'built'}, ${agentFormText()}), ${os.cpus().length} CPUs, load average at start ${loadAtStart}, at end ${loadAvg()}`];
  lines.push(`${'figure'.padEnd(56)} ${'value'.padStart(10)}  goal`);
  for (const r of rows) {
    const verdict = r.goal !== undefined ? `< ${r.goal} ${r.unit}: ${r.value < r.goal ? 'met' : 'NOT met'}`
      : r.atLeast !== undefined ? `>= ${r.atLeast} ${r.unit}: ${r.value >= r.atLeast ? 'met' : 'NOT met'}` : '';
    lines.push(`${r.what.padEnd(56)} ${`${r.value.toFixed(1)} ${r.unit}`.padStart(10)}  ${verdict}`);
  }
  return lines;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  for (const l of await scaleBench(Number(process.argv[2] ?? 10_000))) console.log(l);
  process.exit(0);
}
