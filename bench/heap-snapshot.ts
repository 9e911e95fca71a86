// Heap snapshots of a running agent and what they hold: scale.bench.ts and idle-heap.bench.ts take
// them (node --heapsnapshot-signal=SIGUSR2 --diagnostic-dir=DIR), heap-summary.ts prints one.
import { open, readdir, readFile, stat } from 'node:fs/promises';
import path from 'node:path';

/** The node options that make the agent write a heap snapshot into `dir` on SIGUSR2. */
export const heapSnapshotNodeArgs = (dir: string) => ['--heapsnapshot-signal=SIGUSR2', `--diagnostic-dir=${dir}`];

/** Signals the agent for a heap snapshot and waits (with a deadline) until the file is complete; its path. */
export async function heapSnapshot(pid: number, dir: string): Promise<string> {
  const before = new Set(await readdir(dir));
  process.kill(pid, 'SIGUSR2');
  const deadline = Date.now() + 120_000;
  let lastSize = -1;
  for (;;) {
    const fresh = (await readdir(dir)).find((f) => f.endsWith('.heapsnapshot') && !before.has(f));
    // V8 creates the file, walks the heap, then writes the JSON in place, in chunks: complete once
    // it ends with "]}" and has not grown since the last look (a chunk could end in "]}" too).
    const size = fresh ? (await stat(path.join(dir, fresh))).size : -1;
    if (fresh && size === lastSize && (await endsWithClosingBytes(path.join(dir, fresh), size))) {
      return path.join(dir, fresh);
    }
    lastSize = size;
    if (Date.now() > deadline) throw new Error('no complete heap snapshot within 120 s');
    await new Promise((r) => setTimeout(r, 500)); // polling the file's growth, with the deadline above
  }
}

async function endsWithClosingBytes(file: string, size: number): Promise<boolean> {
  if (size < 2) return false;
  const handle = await open(file, 'r');
  try {
    const tail = Buffer.alloc(2);
    await handle.read(tail, 0, 2, size - 2);
    return tail.toString() === ']}';
  } finally {
    await handle.close();
  }
}

interface HeapSnapshotFile {
  snapshot: { meta: { node_fields: string[]; node_types: [string[], ...unknown[]] } };
  nodes: number[];
  strings: string[];
}

export interface HeapSummary {
  /** Self sizes of every node: the live heap after the full collection a snapshot begins with. */
  totalBytes: number;
  nodes: number;
  /** Objects by constructor; strings, arrays and code by kind only (their names are their contents). */
  byKind: Map<string, { bytes: number; count: number }>;
  /** ArrayBuffer backing store size to how many there are. */
  backingStores: Map<number, number>;
}

export async function summarizeHeap(file: string): Promise<HeapSummary> {
  const snap = JSON.parse(await readFile(file, 'utf8')) as HeapSnapshotFile;
  const fields = snap.snapshot.meta.node_fields;
  const types = snap.snapshot.meta.node_types[0];
  const [type, name, selfSize] = ['type', 'name', 'self_size'].map((f) => fields.indexOf(f)) as [number, number, number];
  const byKind = new Map<string, { bytes: number; count: number }>();
  const backingStores = new Map<number, number>();
  let totalBytes = 0;
  for (let i = 0; i < snap.nodes.length; i += fields.length) {
    const kind = types[snap.nodes[i + type]!]!;
    const label = snap.strings[snap.nodes[i + name]!]!;
    const size = snap.nodes[i + selfSize]!;
    const key = kind === 'object' || kind === 'native' || kind === 'closure' ? `${kind} ${label.slice(0, 60)}` : kind;
    const entry = byKind.get(key) ?? { bytes: 0, count: 0 };
    entry.bytes += size;
    entry.count += 1;
    byKind.set(key, entry);
    if (label === 'system / JSArrayBufferData') backingStores.set(size, (backingStores.get(size) ?? 0) + 1);
    totalBytes += size;
  }
  return { totalBytes, nodes: snap.nodes.length / fields.length, byKind, backingStores };
}

export const MiB = (bytes: number) => `${(bytes / 1048576).toFixed(2)} MiB`;
