import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { silentLogger } from '../src/logging/logger.js';
import { cloneRecord, newStatus } from '../src/machine/record.js';
import { FileMachineStore } from '../src/store/file-store.js';
import { nodeStoreFs } from '../src/store/store-fs.js';
import { percentile } from './common.js';
import { machineName, settledRecord } from './fixtures.js';

// Durable write throughput of the record store: W concurrent writers, each putting its own
// record N times in a row (as SetMachineAnnotations does), every put awaited before the next.
// Goal (issue 12): at least 2,000 acknowledged writes/s with 8 writers.
// Run: npx tsx bench/store-write.bench.ts [writesPerWriter] [writers] [nojournal]

export interface StoreWriteResult { writes: number; perSec: number; p50: number; p99: number; syncsPerWrite: number }

export async function measureWrites(perWriter: number, writers: number, journaled = true): Promise<StoreWriteResult> {
  const root = await mkdtemp(path.join(tmpdir(), 'vmkeeper-bench-'));
  try {
    let syncs = 0;
    const counted = <A extends unknown[]>(f: (...a: A) => Promise<void>) => async (...a: A) => { syncs++; return f(...a); };
    const fs = { fsync: counted(nodeStoreFs.fsync), fdatasync: counted(nodeStoreFs.fdatasync) };
    const journalFile = journaled ? path.join(root, 'journal', 'records.log') : undefined;
    const store = new FileMachineStore({ dir: path.join(root, 'machines'), journalFile, logger: silentLogger, fs });
    await store.load();
    const syncsAtStart = syncs;
    const latencies: number[] = [];
    const writer = async (w: number) => {
      let record = settledRecord(machineName(w), '6f1c1a52-3c1e-4b0e-9a8d-3f1f1b2c0a01', {
        annotations: {},
        spec: { cpus: 1, memoryMiB: 64, domainType: 'qemu', boot: { kernel: '/var/lib/vmkeeper/images/vmlinuz' }, disks: [], nics: [], power: 'off' },
        status: newStatus(),
      });
      for (let i = 0; i < perWriter; i++) {
        const next = cloneRecord(record);
        next.annotations = { n: String(i) };
        const t0 = performance.now();
        record = await store.put(next);
        latencies.push(performance.now() - t0);
      }
    };
    const start = performance.now();
    await Promise.all(Array.from({ length: writers }, (_, w) => writer(w)));
    const seconds = (performance.now() - start) / 1000;
    const syncsPerWrite = (syncs - syncsAtStart) / latencies.length;
    return { writes: latencies.length, perSec: latencies.length / seconds, p50: percentile(latencies, 50), p99: percentile(latencies, 99), syncsPerWrite };
  } finally {
    await rm(root, { recursive: true, force: true });
  }
}

export async function main(perWriter = 500, writers = 8, journaled = true): Promise<StoreWriteResult> {
  const r = await measureWrites(perWriter, writers, journaled);
  const verdict = r.perSec >= 2000 ? 'meets' : 'misses';
  console.log(`store write: ${writers} writers x ${perWriter}: ${r.perSec.toFixed(0)} writes/s (goal >= 2000: ${verdict}) p50=${r.p50.toFixed(2)} ms p99=${r.p99.toFixed(2)} ms fsyncs/write=${r.syncsPerWrite.toFixed(3)} (${journaled ? 'journal' : 'no journal'})`);
  return r;
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  await main(Number(process.argv[2] ?? 500), Number(process.argv[3] ?? 8), process.argv[4] !== 'nojournal');
}
