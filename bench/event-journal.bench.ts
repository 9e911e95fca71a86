// Event journal numbers with the real segment files on this disk:
//   - appends/s and events per fdatasync when 1, 10 and 100 callers append at once
//   - ListEventsSince (a 500-event page from memory) latency while appends are being written
//   - load time of a full journal (10,000 events) at start-up
// Run: npx tsx bench/event-journal.bench.ts
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { EventJournal } from '../src/events/event-journal.js';
import { SegmentFiles } from '../src/events/segment-files.js';
import { systemClock } from '../src/lifecycle/clock.js';
import { silentLogger } from '../src/logging/logger.js';

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

for (const [concurrency, total] of [[1, 500], [10, 3000], [100, 10_000]] as const) await appendRate(concurrency, total);
