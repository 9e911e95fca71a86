// Where the agent's RSS is, from /proc/PID/smaps, through the sequence scale.bench runs: idle
// (sampled every 30 s for VMKEEPER_RSS_IDLE_SEC, default 60), after ListMachines x50 and the
// GetManagedObjects calls, right after 8 writers, and every 30 s for 90 s after them. Columns:
// anonymous mappings (V8's heap, thread stacks, glibc's per-thread arenas), glibc's main arena
// ([heap]) and mapped files (the node binary and libraries).
// Run: VMKEEPER_BENCH_DOMAINS=default npx tsx bench/rss-breakdown.bench.ts [KEY=VALUE ...]
//   (each KEY=VALUE is put in the agent's environment, e.g. MALLOC_ARENA_MAX=1)
import { readFileSync } from 'node:fs';
import { connectBus } from '../src/dbus/bus-address.js';
import { busctlSetUp, managedObjectsTimes, mgr, readsUnderWrites, timeCalls } from './dbus-latency.bench.js';
import { agentFormText, settleAfterDefines, startBenchAgent } from './fixtures.js';
import { rssKiB } from './load-run.js';

const COUNT = 10_000;
const IDLE_SEC = Number(process.env.VMKEEPER_RSS_IDLE_SEC ?? 60);
const AFTER_SEC = 90;
const SAMPLE_MS = 30_000;
const pause = (ms: number) => new Promise((r) => setTimeout(r, ms)); // sampling intervals, not waits for a state
const mib = (kib: number) => `${(kib / 1024).toFixed(1)}`.padStart(6);

function sample(pid: number, moment: string): string {
  const kib: Record<'anon' | 'heap' | 'files', number> = { anon: 0, heap: 0, files: 0 };
  let kind: keyof typeof kib | undefined;
  for (const line of readFileSync(`/proc/${pid}/smaps`, 'utf8').split('\n')) {
    const mapping = /^[0-9a-f]+-[0-9a-f]+ \S+ \S+ \S+ \S+\s*(.*)$/.exec(line);
    if (mapping) {
      const name = mapping[1]!;
      kind = name === '' ? 'anon' : name === '[heap]' ? 'heap' : name.startsWith('/') ? 'files' : undefined;
      continue;
    }
    const rss = /^Rss:\s+(\d+) kB/.exec(line);
    if (rss && kind) kib[kind] += Number(rss[1]);
  }
  return `${moment.padEnd(28)} RSS ${mib(rssKiB(pid))} MiB  anonymous ${mib(kib.anon)}  main arena ${mib(kib.heap)}  files ${mib(kib.files)}`;
}

const env = Object.fromEntries(process.argv.slice(2).map((a) => {
  const at = a.indexOf('=');
  if (at < 1) throw new Error(`not KEY=VALUE: ${JSON.stringify(a)}`);
  return [a.slice(0, at), a.slice(at + 1)];
}));
const bench = await startBenchAgent(COUNT, env);
const pid = bench.agent.child.pid!;
const bus = await connectBus(bench.bus.address);
bus.on('error', () => {});
try {
  await settleAfterDefines(pid);
  console.log(`${COUNT} machines, agent ${agentFormText()}, added ${JSON.stringify(env)}`);
  for (let t = 0; t <= IDLE_SEC; t += SAMPLE_MS / 1000) {
    console.log(sample(pid, `idle, ${t} s`));
    if (t < IDLE_SEC) await pause(SAMPLE_MS);
  }
  await timeCalls(bus, 50, () => mgr('ListMachines'));
  await managedObjectsTimes(bench.bus.address, bus, 10, await busctlSetUp(bench.bus.address, 10));
  console.log(sample(pid, 'after the reads'));
  const { writesPerSec } = await readsUnderWrites(bench.bus.address, bus, 500, COUNT);
  console.log(sample(pid, `after ${writesPerSec.toFixed(0)} writes/s`));
  for (let t = SAMPLE_MS / 1000; t <= AFTER_SEC; t += SAMPLE_MS / 1000) {
    await pause(SAMPLE_MS);
    console.log(sample(pid, `${t} s after the writes`));
  }
} finally {
  bus.disconnect();
  await bench.close();
}
