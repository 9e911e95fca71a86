// 200 concurrent D-Bus clients (4 worker processes, 50 dbus-next connections each) doing reads
// and writes against the real agent (test driver) for VMKEEPER_LOAD_SECONDS (default 60).
// Run: npx tsx bench/load.bench.ts
import { runLoad, rssGrowth } from './load-run.js';
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
  for (const l of await loadBench(Number(process.env.VMKEEPER_LOAD_SECONDS ?? 60))) console.log(l);
  process.exit(0);
}
