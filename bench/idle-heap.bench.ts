// Whether the agent's live heap grows while it runs for a long time: the real agent (packaged form,
// test driver) with COUNT machines, a heap snapshot once it has settled (and warmed up) and another MINUTES later,
// with nothing but its own timers (domain events, resync, sweeps) in between, or with reads: a
// client reading all the while (GetMachine, DescribeMachine, ListMachines, each machine's
// Properties.GetAll, and GetManagedObjects every 10 s). A snapshot begins with a full collection,
// so the two totals are live heap, not garbage. Writes are left out: they add events, whose journal
// grows by design up to events.maxCount.
// Run: npx tsx bench/idle-heap.bench.ts [minutes=5] [count=10000] [idle|reads]
//   (VMKEEPER_BENCH_DOMAINS=default: test:///default with domain events, as in scale.bench.ts)
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Message, type MessageBus } from 'dbus-next';
import { connectBus } from '../src/dbus/bus-address.js';
import { mgr, objectManager } from './dbus-latency.bench.js';
import { agentFormText, machineName, requireDomainEvents, settleAfterDefines, startBenchAgent } from './fixtures.js';
import { heapSnapshot, heapSnapshotNodeArgs, MiB, summarizeHeap, type HeapSummary } from './heap-snapshot.js';

const WARM_UP_MS = 60_000;
const machinePath = (name: string) => `/org/vmkeeper1/machine/${name.replace(/-/g, '_2d')}`;
const getAll = (name: string) => new Message({
  destination: 'org.vmkeeper1', path: machinePath(name), interface: 'org.freedesktop.DBus.Properties', member: 'GetAll', signature: 's', body: ['org.vmkeeper1.Machine'],
});

/** Reads until `stop` says so, one call after another; how many calls it made. */
async function readAllTheWhile(client: MessageBus, count: number, stop: () => boolean): Promise<number> {
  let calls = 0;
  let lastObjects = Date.now();
  const call = async (m: Message) => {
    await client.call(m);
    calls += 1;
  };
  for (let round = 0; !stop(); round++) {
    const name = machineName(round % count);
    await call(mgr('GetMachine', 's', [name]));
    await call(mgr('DescribeMachine', 's', [name]));
    await call(getAll(name));
    if (round % 100 === 0) await call(mgr('ListMachines'));
    if (Date.now() - lastObjects > 10_000) {
      await call(objectManager());
      lastObjects = Date.now();
    }
  }
  return calls;
}

function growth(before: HeapSummary, after: HeapSummary, rows: number): string[] {
  const keys = new Set([...before.byKind.keys(), ...after.byKind.keys()]);
  const deltas = [...keys].map((k) => {
    const a = before.byKind.get(k) ?? { bytes: 0, count: 0 };
    const b = after.byKind.get(k) ?? { bytes: 0, count: 0 };
    return { k, bytes: b.bytes - a.bytes, count: b.count - a.count };
  });
  return deltas.sort((x, y) => Math.abs(y.bytes) - Math.abs(x.bytes)).slice(0, rows)
    .map((d) => `  ${(d.bytes >= 0 ? '+' : '') + (d.bytes / 1024).toFixed(1)} KiB ${(d.count >= 0 ? '+' : '') + d.count} ${d.k}`);
}

export async function idleHeapBench(minutes: number, count: number, mode: 'idle' | 'reads'): Promise<string[]> {
  const heapDir = await mkdtemp(path.join(os.tmpdir(), 'vmk-heap-'));
  const bench = await startBenchAgent(count, {}, heapSnapshotNodeArgs(heapDir));
  try {
    const pid = bench.agent.child.pid!;
    await settleAfterDefines(pid);
    requireDomainEvents(bench.agent);
    const client = await connectBus(bench.bus.address);
    client.on('error', () => {});
    /** The activity for `ms`; the calls it made. */
    const run = async (ms: number): Promise<number> => {
      const until = Date.now() + ms;
      if (mode === 'reads') return readAllTheWhile(client, count, () => Date.now() >= until);
      await new Promise((r) => setTimeout(r, ms)); // the measured interval itself
      return 0;
    };
    // A warm-up of the same activity first: the replies cached by the first reads (the
    // GetManagedObjects body, each machine's elements) and the code V8 compiles for them are
    // there once, not growth. (RSS is not compared: the first snapshot itself raises it.)
    await run(WARM_UP_MS);
    const first = await summarizeHeap(await heapSnapshot(pid, heapDir));
    const calls = await run(minutes * 60_000);
    client.disconnect();
    const second = await summarizeHeap(await heapSnapshot(pid, heapDir));
    const perHour = ((second.totalBytes - first.totalBytes) / minutes) * 60;
    return [
      `${mode} for ${minutes} min after a ${WARM_UP_MS / 1000} s warm-up, ${count} machines (${agentFormText()})${mode === 'reads' ? `, ${calls} calls in the ${minutes} min` : ''}:`,
      `  live heap ${MiB(first.totalBytes)} -> ${MiB(second.totalBytes)} (${MiB(second.totalBytes - first.totalBytes)}, ${MiB(perHour)} per hour)`,
      '  what changed most:',
      ...growth(first, second, 8),
    ];
  } finally {
    await bench.close();
    await rm(heapDir, { recursive: true, force: true });
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const mode = process.argv[4] === 'reads' ? 'reads' : 'idle';
  for (const l of await idleHeapBench(Number(process.argv[2] ?? 5), Number(process.argv[3] ?? 10_000), mode)) console.log(l);
}
