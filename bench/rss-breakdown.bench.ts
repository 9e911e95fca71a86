// Where the agent's RSS is, from /proc/PID/smaps, through the sequence scale.bench runs: idle
// (sampled every 30 s for VMKEEPER_RSS_IDLE_SEC, default 60), after ListMachines x50 and the
// GetManagedObjects calls, right after 8 writers, and every 30 s for 90 s after them. Columns:
// glibc's per-thread arenas (the libuv pool's threads running libvirt calls and file I/O, V8's
// compiler and GC threads), other anonymous mappings (V8's heap, thread stacks, large mallocs),
// glibc's main arena ([heap]) and mapped files (the node binary and libraries).
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

interface Mapping { start: bigint; end: bigint; perms: string; name: string; rssKiB: number }

function mappings(pid: number): Mapping[] {
  const all: Mapping[] = [];
  for (const line of readFileSync(`/proc/${pid}/smaps`, 'utf8').split('\n')) {
    const m = /^([0-9a-f]+)-([0-9a-f]+) (\S+) \S+ \S+ \S+\s*(.*)$/.exec(line);
    if (m) all.push({ start: BigInt(`0x${m[1]}`), end: BigInt(`0x${m[2]}`), perms: m[3]!, name: m[4]!, rssKiB: 0 });
    const rss = /^Rss:\s+(\d+) kB/.exec(line);
    if (rss && all.length > 0) all.at(-1)!.rssKiB = Number(rss[1]);
  }
  return all;
}

/**
 * glibc reserves each heap of a thread arena as 64 MiB (HEAP_MAX_SIZE) at a 64 MiB boundary and
 * makes only its used front read-write: a read-write part there, the rest of the 64 MiB reserved.
 */
const ARENA_HEAP = 64n << 20n;
function isArenaHeap(m: Mapping, next: Mapping | undefined): boolean {
  if (m.name !== '' || m.perms !== 'rw-p' || m.start % ARENA_HEAP !== 0n) return false;
  return m.end - m.start === ARENA_HEAP || (next?.perms === '---p' && next.start === m.end && next.end - m.start === ARENA_HEAP);
}

function sample(pid: number, moment: string): string {
  const kib = { arenas: 0, anon: 0, heap: 0, files: 0 };
  const all = mappings(pid);
  all.forEach((m, i) => {
    if (isArenaHeap(m, all[i + 1])) kib.arenas += m.rssKiB;
    else if (m.name === '') kib.anon += m.rssKiB;
    else if (m.name === '[heap]') kib.heap += m.rssKiB;
    else if (m.name.startsWith('/')) kib.files += m.rssKiB;
  });
  return `${moment.padEnd(28)} RSS ${mib(rssKiB(pid))} MiB  thread arenas ${mib(kib.arenas)}  other anonymous ${mib(kib.anon)}  main arena ${mib(kib.heap)}  files ${mib(kib.files)}`;
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
