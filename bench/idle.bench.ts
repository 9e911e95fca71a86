// Idle cost of the real agent (test driver, default config: 30 s resync, 10 s sweep, and either
// domain events or a 1 s domain poll) with 0 and 10,000 machines: VmRSS and CPU time over a
// window with no client calls.
// Run: npx tsx bench/idle.bench.ts [seconds=30] [counts=0,10000]
//   VMKEEPER_BENCH_DOMAINS=default   domains in test:///default, with domain events (the agent
//                                    defines them first); default: a node file, polled
import { cpuSeconds, rssKiB } from './load-run.js';
import { BENCH_DOMAINS, requireDomainEvents, settleAfterDefines, startBenchAgent } from './fixtures.js';

export async function idleBench(seconds: number, counts = [0, 10_000]): Promise<string[]> {
  const lines: string[] = [];
  for (const count of counts) {
    const bench = await startBenchAgent(count);
    try {
      const pid = bench.agent.child.pid!;
      const settledMs = await settleAfterDefines(pid); // start-up done (first resync; with test:///default, every define)
      requireDomainEvents(bench.agent);
      const cpu0 = cpuSeconds(pid);
      const main0 = cpuSeconds(pid, pid); // the main thread (JavaScript); the rest is V8's helpers and libuv's pool (libvirt calls, files)
      const rss: number[] = [];
      const t0 = Date.now();
      while (Date.now() - t0 < seconds * 1000) {
        rss.push(rssKiB(pid));
        await new Promise((r) => setTimeout(r, 1000));
      }
      const cpu = cpuSeconds(pid) - cpu0;
      const main = cpuSeconds(pid, pid) - main0;
      const wall = (Date.now() - t0) / 1000;
      const share = (s: number) => `${((s / wall) * 100).toFixed(1)}%`;
      lines.push(`idle with ${count} machines (${BENCH_DOMAINS === 'default' ? 'test:///default, events' : 'node file, polled'}; quiet after ${(settledMs / 1000).toFixed(0)} s) over ${wall.toFixed(0)} s: RSS ${(Math.min(...rss) / 1024).toFixed(0)}-${(Math.max(...rss) / 1024).toFixed(0)} MiB, CPU ${cpu.toFixed(2)} s = ${share(cpu)} of one core (main thread ${share(main)}, other threads ${share(cpu - main)})`);
    } finally {
      await bench.close();
    }
  }
  return lines;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const counts = process.argv[3] ? process.argv[3].split(',').map(Number) : undefined;
  for (const l of await idleBench(Number(process.argv[2] ?? 30), counts)) console.log(l);
  process.exit(0);
}
