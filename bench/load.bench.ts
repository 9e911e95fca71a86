// 200 concurrent D-Bus clients (4 worker processes, 50 dbus-next connections each) doing reads
// and writes against the real agent (test driver) for VMKEEPER_LOAD_SECONDS (default 60).
// Run: npx tsx bench/load.bench.ts (or `npx tsx bench/load.bench.ts writers [clients]`: 8 annotation writers;
// VMKEEPER_WRITERS_MACHINES=10000 runs them beside that many stored machines)
import { cpuSeconds, runLoad, rssGrowth, rssKiB } from './load-run.js';
import { startBenchAgent } from './fixtures.js';

export async function loadBench(seconds: number, clients = 200): Promise<string[]> {
  const bench = await startBenchAgent(0);
  try {
    const s = await runLoad({ address: bench.bus.address, agentPid: bench.agent.child.pid!, clients, workers: 4, durationMs: seconds * 1000 });
    const g = rssGrowth(s.rss, seconds);
    return [
      `load ${clients} clients x ${seconds} s: ${s.calls} calls (${s.callsPerSec.toFixed(0)}/s) p50=${s.p50.toFixed(1)} ms p99=${s.p99.toFixed(1)} ms max=${s.max.toFixed(0)} ms`,
      ...Object.entries(s.byOp).map(([op, v]) => `  ${op.padEnd(30)} n=${v.n} p50=${v.p50.toFixed(1)} ms p99=${v.p99.toFixed(1)} ms`),
      `  errors: ${JSON.stringify(s.errors)}`,
      `  agent RSS: start ${(s.rss[0]![1] / 1024).toFixed(0)} MiB, after warm-up ${(g.warm / 1024).toFixed(0)} MiB, last third max ${(g.late / 1024).toFixed(0)} MiB, end ${(s.rss.at(-1)![1] / 1024).toFixed(0)} MiB`,
    ];
  } finally {
    await bench.close();
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  if (process.argv[2] === 'writers') {
    console.log(await annotationWriters(Number(process.env.VMKEEPER_LOAD_SECONDS ?? 10), Number(process.argv[3] ?? 8)));
    process.exit(0);
  }
  for (const l of await loadBench(Number(process.env.VMKEEPER_LOAD_SECONDS ?? 60))) console.log(l);
  process.exit(0);
}

/**
 * Acknowledged writes over the bus: `clients` connections, each creating its own machine and then
 * calling SetMachineAnnotations on it in a loop for `seconds`. Goal (issue 12): >= 2,000 writes/s with 8.
 */
export async function annotationWriters(seconds: number, clients = 8): Promise<string> {
  const { connectBus } = await import('../src/dbus/bus-address.js');
  const { Message } = await import('dbus-next');
  const { percentile } = await import('./common.js');
  const stored = Number(process.env.VMKEEPER_WRITERS_MACHINES ?? 0);
  const bench = await startBenchAgent(stored);
  try {
    const spec = JSON.stringify({ cpus: 1, memoryMiB: 64, disks: [{ name: 'root', sizeGiB: 1 }], power: 'off' });
    const manager = (member: string, signature: string, body: unknown[]) =>
      new Message({ destination: 'org.vmkeeper1', path: '/org/vmkeeper1', interface: 'org.vmkeeper1.Manager', member, signature, body });
    const buses = await Promise.all(Array.from({ length: clients }, () => connectBus(bench.bus.address)));
    await Promise.all(buses.map((bus, i) => bus.call(manager('CreateMachine', 'ss', [`writer-${i}`, spec]))));
    const latencies: number[] = [];
    const deadline = Date.now() + seconds * 1000;
    const agentPid = bench.agent.child.pid!;
    const cpu0 = { agent: cpuSeconds(agentPid), bus: cpuSeconds(bench.bus.pid), clients: process.cpuUsage() };
    const start = performance.now();
    await Promise.all(buses.map(async (bus, i) => {
      for (let n = 0; Date.now() < deadline; n++) {
        const t0 = performance.now();
        await bus.call(manager('SetMachineAnnotations', 'sa{ss}', [`writer-${i}`, { n: String(n) }]));
        latencies.push(performance.now() - t0);
      }
    }));
    const wall = (performance.now() - start) / 1000;
    const perSec = latencies.length / wall;
    const clientCpu = process.cpuUsage(cpu0.clients);
    const share = (s: number) => `${((s / wall) * 100).toFixed(0)}%`;
    const cpu = `CPU agent ${share(cpuSeconds(agentPid) - cpu0.agent)}, dbus-daemon ${share(cpuSeconds(bench.bus.pid) - cpu0.bus)}, clients ${share((clientCpu.user + clientCpu.system) / 1e6)} of a core`;
    const rssMiB = rssKiB(agentPid) / 1024;
    for (const bus of buses) bus.disconnect();
    return `annotation writers ${clients} x ${seconds} s (${stored} other machines): ${perSec.toFixed(0)} acknowledged writes/s (goal >= 2000: ${perSec >= 2000 ? 'meets' : 'misses'}) p50=${percentile(latencies, 50).toFixed(1)} ms p99=${percentile(latencies, 99).toFixed(1)} ms, agent RSS after ${rssMiB.toFixed(0)} MiB; ${cpu}`;
  } finally {
    await bench.close();
  }
}
