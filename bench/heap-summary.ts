// Sums a V8 heap snapshot's self sizes by kind and constructor, largest first, and lists the sizes
// of the ArrayBuffer backing stores: what `scale.bench.ts` with VMKEEPER_SCALE_HEAP_DIR leaves.
// Run: npx tsx bench/heap-summary.ts <file.heapsnapshot> [rows=25]
import { readFile } from 'node:fs/promises';

interface HeapSnapshot {
  snapshot: { meta: { node_fields: string[]; node_types: [string[], ...unknown[]] } };
  nodes: number[];
  strings: string[];
}

const MiB = (bytes: number) => `${(bytes / 1048576).toFixed(2)} MiB`;

async function main(file: string, rows: number): Promise<void> {
  const snap = JSON.parse(await readFile(file, 'utf8')) as HeapSnapshot;
  const fields = snap.snapshot.meta.node_fields;
  const types = snap.snapshot.meta.node_types[0];
  const [type, name, selfSize] = ['type', 'name', 'self_size'].map((f) => fields.indexOf(f)) as [number, number, number];
  const byKind = new Map<string, { bytes: number; count: number }>();
  const backingStores = new Map<number, number>();
  let total = 0;
  for (let i = 0; i < snap.nodes.length; i += fields.length) {
    const kind = types[snap.nodes[i + type]!]!;
    const label = snap.strings[snap.nodes[i + name]!]!;
    const size = snap.nodes[i + selfSize]!;
    // Objects by constructor; strings, arrays and code by kind only (their names are their contents).
    const key = kind === 'object' || kind === 'native' || kind === 'closure' ? `${kind} ${label.slice(0, 60)}` : kind;
    const entry = byKind.get(key) ?? { bytes: 0, count: 0 };
    entry.bytes += size;
    entry.count += 1;
    byKind.set(key, entry);
    if (label === 'system / JSArrayBufferData') backingStores.set(size, (backingStores.get(size) ?? 0) + 1);
    total += size;
  }
  console.log(`${file}: ${MiB(total)} in ${snap.nodes.length / fields.length} nodes`);
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
