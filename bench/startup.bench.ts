// Start-up of the real agent (built, as the packages run it; libvirt test driver) with N machine
// records: time from spawn to READY=1 on a NOTIFY_SOCKET we create (python3 receiver), and to the
// first answered GetMachine. A first start settles the state and warms the page cache; the
// restarts after it are measured, and their median printed.
// Run: npx tsx bench/startup.bench.ts [count=10000] [restarts=3]
//   (VMKEEPER_BENCH_DOMAINS=default: domains in test:///default, as scale.bench.ts can)
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { busctlCall } from '../test/support/busctl.js';
import { spawnAgent } from '../test/support/agent-process.js';
import { startSessionBus } from '../test/support/dbus-daemon.js';
import { BENCH_DOMAINS, benchAgentForm, buildAgentOnce, notifyReceiver, recordsFromSnapshot, writeMachines } from './fixtures.js';
import { percentile } from './common.js';

export async function startupBench(count: number, runs = 3): Promise<string[]> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'vmk-start-'));
  const written = await writeMachines(dir, count);
  const { stateDir, imageDir } = written;
  const uri = BENCH_DOMAINS === 'default' ? 'test:///default' : written.uri;
  const bus = await startSessionBus();
  const configFile = path.join(dir, 'config.yaml');
  await writeFile(configFile, 'log:\n  level: warn\n');
  await buildAgentOnce();
  const form = benchAgentForm();
  // The restarts log at info: their "loaded ... machine records" line says how many came from the snapshot.
  const spawnOnce = (env: NodeJS.ProcessEnv = {}, level = 'warn') =>
    spawnAgent({ busAddress: bus.address, stateDir, imageDir, libvirtUri: uri, configFile, extraArgs: ['--log-level', level], built: form.built, env: { ...form.env, ...env }, nodeArgs: form.nodeArgs });
  const lines: string[] = [];
  const ready: number[] = [];
  const answered: number[] = [];
  try {
    const first = spawnOnce();
    await first.ready(300_000);
    await first.stop();
    for (let run = 0; run < runs; run++) {
      const sock = path.join(dir, `notify-${run}.sock`);
      const receiver = notifyReceiver(sock);
      await receiver.listening;
      const t0 = Date.now();
      const agent = spawnOnce({ NOTIFY_SOCKET: sock }, 'info');
      let answeredAt = 0;
      for (;;) {
        const ok = await busctlCall(bus.address, '/org/vmkeeper1', 'org.vmkeeper1.Manager', 'GetMachine', 's', ['vm-00000']).then(() => true, () => false);
        if (ok) {
          answeredAt = Date.now();
          break;
        }
        if (agent.child.exitCode !== null) throw new Error(`agent exited:\n${agent.output()}`);
        if (Date.now() - t0 > 300_000) throw new Error('no answer within 300 s');
      }
      const readyAt = await Promise.race([receiver.ready, agent.exited.then(() => { throw new Error(`agent exited:\n${agent.output()}`); })]);
      answered.push(answeredAt - t0);
      ready.push(readyAt - t0);
      lines.push(`restart ${run + 1} with ${count} records: GetMachine answered after ${answeredAt - t0} ms, READY=1 after ${Math.round(readyAt - t0)} ms, ${recordsFromSnapshot(agent)} records from the snapshot`);
      await agent.stop();
      receiver.stop();
    }
    lines.push(`median of ${runs}: first GetMachine ${percentile(answered, 50)} ms (goal < 2000 ms), READY=1 ${Math.round(percentile(ready, 50))} ms`);
  } finally {
    await bus.stop();
    await rm(dir, { recursive: true, force: true });
  }
  return lines;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  for (const l of await startupBench(Number(process.argv[2] ?? 10_000), Number(process.argv[3] ?? 3))) console.log(l);
  process.exit(0);
}
