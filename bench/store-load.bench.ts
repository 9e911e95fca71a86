import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { silentLogger } from '../src/logging/logger.js';
import { newStatus } from '../src/machine/record.js';
import { FileMachineStore } from '../src/store/file-store.js';
import { machineName, settledRecord, writeRecordFiles } from './fixtures.js';

// Start-up cost of the record store: how long load() takes for many machine files.
// Run: npx tsx bench/store-load.bench.ts [count]

/** Running machines with a bigger spec than bench/fixtures.ts's (every field of a record in use). */
function writeRecords(dir: string, count: number): Promise<void> {
  const records = Array.from({ length: count }, (_, i) =>
    settledRecord(machineName(i), '6f1c1a52-3c1e-4b0e-9a8d-3f1f1b2c0a01', {
      annotations: { owner: 'bench', team: 'storage' },
      spec: {
        cpus: 2,
        memoryMiB: 1024,
        domainType: 'qemu',
        boot: { kernel: '/var/lib/vmkeeper/images/vmlinuz', cmdline: 'console=ttyS0 quiet' },
        disks: [{ name: 'root', image: '/var/lib/vmkeeper/images/base.qcow2' }, { name: 'data', sizeGiB: 20 }],
        nics: [{ name: 'eth0', network: 'default' }],
        power: 'on',
      },
      status: { ...newStatus(), state: 'running', domainDefined: true },
    }),
  );
  return writeRecordFiles(dir, records);
}

/** Writes count records to a temp dir, loads them with a fresh store, returns milliseconds. */
export async function measureLoad(count: number): Promise<{ ms: number; loaded: number }> {
  const root = await mkdtemp(path.join(tmpdir(), 'vmkeeper-bench-'));
  try {
    const dir = path.join(root, 'machines');
    await writeRecords(dir, count);
    const store = new FileMachineStore({ dir, logger: silentLogger });
    const start = process.hrtime.bigint();
    const { records } = await store.load();
    const ms = Number(process.hrtime.bigint() - start) / 1e6;
    return { ms, loaded: records };
  } finally {
    await rm(root, { recursive: true, force: true });
  }
}

export async function main(count = 10_000): Promise<number> {
  const { ms, loaded } = await measureLoad(count);
  console.log(`store load: ${loaded} records in ${Math.round(ms)} ms`);
  return ms;
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  await main(Number(process.argv[2] ?? 10_000));
}
