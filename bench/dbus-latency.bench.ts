// D-Bus call latency of the real agent (test driver), each as a ratio to a baseline round trip to
// the bus daemon itself (org.freedesktop.DBus.GetId) on the same connection:
//   GetMachine, ListMachines with 1,000 and 10,000 machines, CreateMachine throughput; with 10,000
//   also GetManagedObjects and GetMachine while 8 other connections write flat out, against the
//   goals of issue 12.
// Run: npx tsx bench/dbus-latency.bench.ts   (env VMKEEPER_BENCH_N: calls per measurement, default 500;
//   VMKEEPER_BENCH_COUNTS: machine counts, default 1000,10000)
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { Message, type MessageBus } from 'dbus-next';
import { connectBus } from '../src/dbus/bus-address.js';
import { cacheDbusSignatures } from '../src/dbus/signature-cache.js';
import { percentile } from './common.js';
import { machineName, startBenchAgent } from './fixtures.js';

const N = Number(process.env.VMKEEPER_BENCH_N ?? 500);
const COUNTS = (process.env.VMKEEPER_BENCH_COUNTS ?? '1000,10000').split(',').map(Number);
const WRITERS = 8;
const SPEC = JSON.stringify({ cpus: 1, memoryMiB: 64, disks: [{ name: 'root', sizeGiB: 1 }], power: 'off' });

export async function timeCalls(bus: MessageBus, n: number, make: (i: number) => Message): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < Math.min(20, n); i++) await bus.call(make(i)); // warm-up
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    await bus.call(make(i));
    out.push(performance.now() - t0);
  }
  return out;
}

export const getId = () => new Message({ destination: 'org.freedesktop.DBus', path: '/org/freedesktop/DBus', interface: 'org.freedesktop.DBus', member: 'GetId' });
export const mgr = (member: string, signature = '', body: unknown[] = []) =>
  new Message({ destination: 'org.vmkeeper1', path: '/org/vmkeeper1', interface: 'org.vmkeeper1.Manager', member, signature, body });

export const objectManager = () =>
  new Message({ destination: 'org.vmkeeper1', path: '/org/vmkeeper1', interface: 'org.freedesktop.DBus.ObjectManager', member: 'GetManagedObjects' });

function line(label: string, values: number[], baseline: number): string {
  const p50 = percentile(values, 50);
  return `${label.padEnd(34)} p50=${p50.toFixed(3)} ms p99=${percentile(values, 99).toFixed(3)} ms  ratio(p50)=${(p50 / baseline).toFixed(1)}x`;
}

/**
 * busctl calls, each a new process: with the reply not printed (`printed` false), the agent's and
 * the bus's share of a big reply without any client-side decoding; printed, what an operator's
 * `busctl call` costs, decoding and formatting included. `minus` is the same for GetId, the process
 * and connection set-up.
 */
export async function busctlTimes(address: string, n: number, args: string[], printed = false): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n + 2; i++) {
    const t0 = performance.now();
    await promisify(execFile)('busctl', ['--address', address, ...(printed ? [] : ['--quiet']), 'call', ...args], { maxBuffer: 1 << 28 });
    if (i >= 2) out.push(performance.now() - t0);
  }
  return out;
}

const GET_MANAGED_OBJECTS = ['org.vmkeeper1', '/org/vmkeeper1', 'org.freedesktop.DBus.ObjectManager', 'GetManagedObjects'];

/** p50 of busctl's GetId to the bus daemon: a busctl call's process and connection set-up. */
export async function busctlSetUp(address: string, n: number): Promise<number> {
  return percentile(await busctlTimes(address, n, ['org.freedesktop.DBus', '/org/freedesktop/DBus', 'org.freedesktop.DBus', 'GetId']), 50);
}

/**
 * GetManagedObjects p50 through four clients: dbus-next with its own reader, dbus-next with the
 * signature cache the agent and vmkeeperctl install, and busctl with the reply printed and not
 * (both less `setUp`, from busctlSetUp). Every client but `busctl -q` includes its own decoding
 * of the 160,000 properties of 10,000 machines.
 */
export async function managedObjectsTimes(address: string, client: MessageBus, runs: number, setUp: number): Promise<Array<{ what: string; p50: number }>> {
  // The bench process reads with dbus-next's own reader (nothing else here installs the cache):
  // the two readers take turns, half the runs each time, and the stock one is put back each time.
  const stock: number[] = [];
  const cached: number[] = [];
  const half = Math.ceil(runs / 2);
  for (let turn = 0; turn < 2; turn++) {
    stock.push(...(await timeCalls(client, half, objectManager)));
    const putBack = cacheDbusSignatures();
    try {
      cached.push(...(await timeCalls(client, half, objectManager)));
    } finally {
      putBack();
    }
  }
  const printed = await busctlTimes(address, runs, GET_MANAGED_OBJECTS, true);
  const quiet = await busctlTimes(address, runs, GET_MANAGED_OBJECTS);
  return [
    { what: 'dbus-next, its own reader', p50: percentile(stock, 50) },
    { what: 'dbus-next, signature cache (vmkeeperctl)', p50: percentile(cached, 50) },
    { what: 'busctl, reply printed, - GetId', p50: percentile(printed, 50) - setUp },
    { what: 'busctl -q, - GetId', p50: percentile(quiet, 50) - setUp },
  ];
}

function goal(label: string, value: number, limit: number): string {
  return `  goal ${label} < ${limit} ms: ${value.toFixed(1)} ms, ${value < limit ? 'met' : 'NOT met'}`;
}

/** GetMachine on `bus` while WRITERS other connections set annotations on their own machines without pause. */
const WRITE_WINDOW_MS = 8000;

export async function readsUnderWrites(address: string, bus: MessageBus, n: number, count: number): Promise<{ reads: number[]; writesPerSec: number }> {
  const writers = await Promise.all(Array.from({ length: WRITERS }, () => connectBus(address)));
  let stop = false;
  let writes = 0;
  const loops = writers.map(async (w, k) => {
    w.on('error', () => {});
    for (let i = 0; !stop; i++) {
      await w.call(mgr('SetMachineAnnotations', 'sa{ss}', [machineName(k), { 'bench/write': String(i) }]));
      writes++;
    }
  });
  try {
    // Let every writer get going before the first measured read.
    while (writes < WRITERS * 4) await bus.call(mgr('GetMachine', 's', [machineName(count - 1)]));
    const w0 = writes;
    const r0 = performance.now();
    const reads = await timeCalls(bus, n, (i) => mgr('GetMachine', 's', [machineName((i * 7919) % count)]));
    // Writes are counted over at least WRITE_WINDOW_MS (the reads alone can take under a second),
    // with the reader still going.
    for (let i = 0; performance.now() - r0 < WRITE_WINDOW_MS; i++) await bus.call(mgr('GetMachine', 's', [machineName((i * 7919) % count)]));
    const writesPerSec = (writes - w0) / ((performance.now() - r0) / 1000);
    return { reads, writesPerSec };
  } finally {
    stop = true;
    await Promise.allSettled(loops);
    for (const w of writers) w.disconnect();
  }
}

export async function dbusLatencyBench(): Promise<string[]> {
  const lines: string[] = [];
  for (const count of COUNTS) {
    const bench = await startBenchAgent(count);
    const bus = await connectBus(bench.bus.address);
    bus.on('error', () => {});
    try {
      const base = await timeCalls(bus, N, getId);
      const baseline = percentile(base, 50);
      lines.push(`-- ${count} machines --`);
      lines.push(`${'baseline GetId (bus daemon)'.padEnd(34)} p50=${baseline.toFixed(3)} ms p99=${percentile(base, 99).toFixed(3)} ms`);
      lines.push(line('GetMachine', await timeCalls(bus, N, (i) => mgr('GetMachine', 's', [machineName(i % count)])), baseline));
      const list = await timeCalls(bus, count >= 10_000 ? Math.min(N, 50) : Math.min(N, 200), () => mgr('ListMachines'));
      lines.push(line(`ListMachines (${count})`, list, baseline));
      if (count >= 10_000) {
        lines.push(goal('ListMachines p50', percentile(list, 50), 50));
        const runs = Math.min(N, 15);
        const setUp = await busctlSetUp(bench.bus.address, runs);
        const listBusctl = await busctlTimes(bench.bus.address, runs, ['org.vmkeeper1', '/org/vmkeeper1', 'org.vmkeeper1.Manager', 'ListMachines']);
        lines.push(`${'busctl -q ListMachines'.padEnd(34)} p50=${percentile(listBusctl, 50).toFixed(1)} ms, minus GetId ${(percentile(listBusctl, 50) - setUp).toFixed(1)} ms`);
        for (const { what, p50 } of await managedObjectsTimes(bench.bus.address, bus, runs, setUp)) {
          lines.push(goal(`GetManagedObjects p50 (${what})`, p50, 500));
        }
        const { reads, writesPerSec } = await readsUnderWrites(bench.bus.address, bus, N, count);
        lines.push(`${line(`GetMachine, ${WRITERS} writers`, reads, baseline)}  (${writesPerSec.toFixed(0)} annotation writes/s acknowledged meanwhile)`);
        lines.push(goal(`GetMachine p99 with ${WRITERS} writers`, percentile(reads, 99), 20));
      }
      if (count === 1000) {
        // Throughput: sequential creates, then 16 concurrent streams.
        const seq = await timeCalls(bus, Math.min(N, 200), (i) => mgr('CreateMachine', 'ss', [`seq-${i}-${Date.now() % 100000}`, SPEC]));
        lines.push(`${line('CreateMachine (sequential)', seq, baseline)}  ${(1000 / (seq.reduce((a, b) => a + b, 0) / seq.length)).toFixed(0)}/s`);
        const total = 400;
        let next = 0;
        const t0 = performance.now();
        await Promise.all(Array.from({ length: 16 }, async () => {
          while (next < total) await bus.call(mgr('CreateMachine', 'ss', [`par-${next++}`, SPEC]));
        }));
        const secs = (performance.now() - t0) / 1000;
        lines.push(`${'CreateMachine (16 concurrent)'.padEnd(34)} ${(total / secs).toFixed(0)} creates/s (${total} in ${secs.toFixed(2)} s)`);
      }
    } finally {
      bus.disconnect();
      await bench.close();
    }
  }
  return lines;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  for (const l of await dbusLatencyBench()) console.log(l);
  process.exit(0);
}
