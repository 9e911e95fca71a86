// Event journal numbers with the real segment files on this disk:
//   - appends/s and events per fdatasync when 1, 10 and 100 callers append at once
//   - ListEventsSince (a 500-event page from memory) latency while appends are being written
//   - load time of a full journal (10,000 events) at start-up
// Run: npx tsx bench/event-journal.bench.ts
//
// What retention costs (`events.maxCount`): every kept event is held in memory and read at start-up.
//   node --expose-gc --import tsx bench/event-journal.bench.ts retention 100000 1000000
// prints, per count, the segment files' size, the load time and the heap the loaded events take.
import { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { EventJournal } from '../src/events/event-journal.js';
import { SegmentFiles } from '../src/events/segment-files.js';
import { systemClock } from '../src/lifecycle/clock.js';
import { silentLogger } from '../src/logging/logger.js';
import { percentile } from './common.js';

const RETENTION = { maxCount: 10_000, maxAgeMs: 7 * 24 * 3600 * 1000 };

async function open(dir: string, onBatch?: () => void): Promise<EventJournal> {
  const journal = new EventJournal({ clock: systemClock, logger: silentLogger, retention: RETENTION, files: new SegmentFiles(dir, silentLogger), onDurable: onBatch });
  await journal.open();
  return journal;
}

const event = (i: number) => ({ timestamp: Date.now(), machine: `m-${i % 100}`, type: 'normal' as const, reason: 'AnnotationsChanged', message: `annotations replaced (${i % 7} keys)`, actor: { uid: 1000, call: 'SetMachineAnnotationsIfVersion' } });

async function appendRate(concurrency: number, total: number): Promise<void> {
  const dir = mkdtempSync(path.join(tmpdir(), 'journal-bench-'));
  let batches = 0;
  const journal = await open(dir, () => batches++);
  const start = performance.now();
  // Each "caller" appends and waits for its event to be on disk, as a D-Bus call does.
  await Promise.all(Array.from({ length: concurrency }, async (_, c) => {
    for (let i = c; i < total; i += concurrency) {
      journal.append(event(i));
      await journal.flushed();
    }
  }));
  const seconds = (performance.now() - start) / 1000;
  const appendBatches = batches;
  const reads: number[] = [];
  const writing = (async () => {
    for (let i = 0; i < 2000; i++) {
      journal.append(event(i));
      if (i % 50 === 0) await journal.flushed();
    }
    await journal.flushed();
  })();
  for (let i = 0; i < 200; i++) {
    const t = performance.now();
    journal.since(journal.lastSequence - 600 > 0 ? journal.lastSequence - 600 : 0, undefined, 500);
    reads.push(performance.now() - t);
    await new Promise((r) => setImmediate(r));
  }
  await writing;
  await journal.close();
  reads.sort((a, b) => a - b);
  console.log(`concurrency ${concurrency}: ${Math.round(total / seconds)} durable appends/s, ${(total / appendBatches).toFixed(1)} events per fdatasync; ` +
    `ListEventsSince page p50 ${reads[100]!.toFixed(3)} ms, p99 ${reads[198]!.toFixed(3)} ms while appending`);
  if (concurrency === 100) {
    const t = performance.now();
    const again = await open(dir);
    console.log(`load of ${again.since(0, undefined, 100_000).events.length} kept events: ${(performance.now() - t).toFixed(1)} ms`);
    await again.close();
  }
  rmSync(dir, { recursive: true, force: true });
}

/** Events as the agent writes them: machine names of a fleet, messages naming the domain, half caused by a caller. */
const fleetEvent = (i: number) => {
  const machine = `web-${i % 10_000}`;
  return { timestamp: Date.now(), machine, type: 'normal' as const, reason: i % 2 ? 'Started' : 'AnnotationsChanged',
    message: i % 2 ? `domain vmkeeper-${machine} started` : `annotations replaced (${i % 7} keys)`,
    ...(i % 2 ? {} : { actor: { uid: 1000, call: 'SetMachineAnnotationsIfVersion' } }) };
};

function liveHeapMiB(): number {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (!gc) throw new Error('run with node --expose-gc --import tsx');
  gc();
  gc();
  return process.memoryUsage().heapUsed / 2 ** 20;
}

async function fill(journal: EventJournal, count: number): Promise<void> {
  for (let i = 0; i < count; i += 1000) {
    for (let j = i; j < Math.min(count, i + 1000); j++) journal.append(fleetEvent(j));
    await journal.flushed();
  }
  await journal.close();
}

async function retentionCost(count: number): Promise<void> {
  const dir = mkdtempSync(path.join(tmpdir(), 'journal-retention-'));
  const retention = { maxCount: count, maxAgeMs: 365 * 24 * 3600 * 1000 };
  const openKept = async () => {
    const journal = new EventJournal({ clock: systemClock, logger: silentLogger, retention, files: new SegmentFiles(dir, silentLogger) });
    await journal.open();
    return journal;
  };
  await fill(await openKept(), count); // closed, and its events collectable before the load is measured
  const bytes = readdirSync(dir).reduce((sum, f) => sum + statSync(path.join(dir, f)).size, 0);
  const before = liveHeapMiB();
  const t = performance.now();
  const loaded = await openKept();
  const loadMs = performance.now() - t;
  const kept = loaded.since(0, undefined, Number.MAX_SAFE_INTEGER).events.length;
  const heap = liveHeapMiB() - before;
  // A tool following one machine from cursor 0: the journal walks every kept event to fill the page.
  const pages: number[] = [];
  for (let i = 0; i < 20; i++) {
    const at = performance.now();
    loaded.since(0, `web-${i}`, 500);
    pages.push(performance.now() - at);
  }
  console.log(`retention ${count}: ${kept} events kept, ${(bytes / 2 ** 20).toFixed(1)} MiB on disk, ` +
    `load ${loadMs.toFixed(0)} ms, heap ${heap.toFixed(1)} MiB (${Math.round((heap * 2 ** 20) / kept)} bytes/event); ` +
    `one machine's page from cursor 0: p50 ${percentile(pages, 50).toFixed(1)} ms`);
  await loaded.close();
  rmSync(dir, { recursive: true, force: true });
}

if (process.argv[2] === 'retention') {
  for (const count of process.argv.slice(3).map(Number)) await retentionCost(count);
} else {
  for (const [concurrency, total] of [[1, 500], [10, 3000], [100, 10_000]] as const) await appendRate(concurrency, total);
}
