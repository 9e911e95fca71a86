// Sums a V8 heap snapshot's self sizes by kind and constructor, largest first, and lists the sizes
// of the ArrayBuffer backing stores: what `scale.bench.ts` with VMKEEPER_SCALE_HEAP_DIR leaves.
// Run: npx tsx bench/heap-summary.ts <file.heapsnapshot> [rows=25]
import { MiB, summarizeHeap } from './heap-snapshot.js';

async function main(file: string, rows: number): Promise<void> {
  const { totalBytes, nodes, byKind, backingStores } = await summarizeHeap(file);
  console.log(`${file}: ${MiB(totalBytes)} in ${nodes} nodes`);
  for (const [key, { bytes, count }] of [...byKind].sort((a, b) => b[1].bytes - a[1].bytes).slice(0, rows)) {
    console.log(`${MiB(bytes).padStart(12)} ${String(count).padStart(9)}  ${key}`);
  }
  console.log('ArrayBuffer backing stores by size:');
  for (const [size, count] of [...backingStores].sort((a, b) => b[0] * b[1] - a[0] * a[1]).slice(0, 8)) {
    console.log(`${MiB(size * count).padStart(12)} ${String(count).padStart(9)} x ${size} B`);
  }
}

const [file, rows] = process.argv.slice(2);
if (!file) {
  console.error('usage: npx tsx bench/heap-summary.ts <file.heapsnapshot> [rows=25]');
  process.exit(2);
}
await main(file, Number(rows ?? 25));
