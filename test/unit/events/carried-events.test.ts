import { promises as fs } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { CARRIED_WRITE_DELAY_MS, EventJournal } from '../../../src/events/event-journal.js';
import { SegmentFiles } from '../../../src/events/segment-files.js';
import type { AgentEvent } from '../../../src/events/recorded-event.js';
import { silentLogger } from '../../../src/logging/logger.js';
import { FakeClock } from '../../support/fakes/fake-clock.js';
import { waitFor } from '../../support/wait.js';

// Events a record write reserves: invisible until settled, carried ones durable with no sync of
// their own (the record journal's frame holds them), given back by recover() after a crash.

const DAY = 24 * 3600 * 1000;

/** Segment files that log each disk step; `failAppends` makes that many appends fail first. */
class SpySegments extends SegmentFiles {
  readonly steps: string[] = [];
  /** Appends that have finished (steps logs each as it begins). */
  appended = 0;
  failAppends = 0;
  failSyncs = 0;
  override async append(frames: Buffer, sync = true): Promise<void> {
    if (this.failAppends > 0) {
      this.failAppends--;
      this.steps.push('append failed');
      throw Object.assign(new Error('EIO: i/o error, write'), { code: 'EIO' });
    }
    this.steps.push(sync ? 'append+sync' : 'append');
    await super.append(frames, sync);
    this.appended++;
  }
  override async sync(): Promise<void> {
    if (this.failSyncs > 0) {
      this.failSyncs--;
      this.steps.push('sync failed');
      throw Object.assign(new Error('EIO: i/o error, fdatasync'), { code: 'EIO' });
    }
    this.steps.push('sync');
    await super.sync();
  }
}

describe('event journal: events reserved by record writes', () => {
  let dir: string;
  let clock: FakeClock;
  const open: EventJournal[] = [];

  beforeEach(async () => {
    dir = await fs.mkdtemp(path.join(os.tmpdir(), 'journal-carried-'));
    clock = new FakeClock();
  });
  afterEach(async () => {
    for (const j of open.splice(0)) await j.close();
    await fs.rm(dir, { recursive: true, force: true });
  });

  async function journal(durable: AgentEvent[] = []): Promise<{ j: EventJournal; files: SpySegments }> {
    const files = new SpySegments(dir, silentLogger);
    const j = new EventJournal({ clock, logger: silentLogger, retention: { maxCount: 1000, maxAgeMs: 7 * DAY }, files, onDurable: (b) => durable.push(...b) });
    open.push(j);
    await j.open();
    return { j, files };
  }
  const fields = (message: string) => ({ timestamp: clock.now(), machine: 'web-1', type: 'normal' as const, reason: 'Test', message });
  const sequences = (j: EventJournal) => j.since(0, undefined, 100).events.map((e) => e.sequence);
  async function reopen(j: EventJournal) {
    await j.close();
    open.splice(open.indexOf(j), 1);
    return journal();
  }

  it('a reserved event is invisible and holds back later events; cancelled, it leaves an unused sequence and lets them through', async () => {
    const durable: AgentEvent[] = [];
    const { j } = await journal(durable);
    const reserved = j.reserve(fields('reserved'));
    const later = j.append(fields('later'));
    const laterDurable = j.durable(later);
    expect(j.recent(10).map((e) => e.message)).toEqual(['later']);
    expect(sequences(j)).toEqual([]);
    j.cancel(reserved);
    await laterDurable;
    expect(sequences(j)).toEqual([2]);
    expect(durable.map((e) => e.sequence)).toEqual([2]);
    const { j: again } = await reopen(j);
    expect(sequences(again)).toEqual([2]);
    expect(again.append(fields('next')).sequence).toBe(3);
  });

  it('a carried event is durable without a sync of its own, shown once its caller confirms; secure() writes and syncs it', async () => {
    const durable: AgentEvent[] = [];
    const { j, files } = await journal(durable);
    const event = j.reserve(fields('carried'));
    j.carry(event);
    // The record change is announced first: only then the event.
    expect(sequences(j)).toEqual([]);
    j.release(event);
    // Shown before any disk step of the event journal's own.
    expect(sequences(j)).toEqual([1]);
    expect(durable.map((e) => e.sequence)).toEqual([1]);
    await j.durable(event);
    await j.secure();
    expect(files.steps).toEqual(['append', 'sync']);
    const { j: again } = await reopen(j);
    expect(again.since(0, undefined, 10).events.map((e) => e.message)).toEqual(['carried']);
  });

  it('carried events wait for company: several record batches share one segment write, and an event that needs its sync ends the wait', async () => {
    const { j, files } = await journal();
    const carry = (message: string) => {
      const event = j.reserve(fields(message));
      j.carry(event);
      j.release(event);
    };
    expect(clock.pendingTimers).toBe(0);
    carry('first');
    await waitFor(() => clock.pendingTimers > 0);
    await clock.advance(CARRIED_WRITE_DELAY_MS - 1);
    carry('second');
    expect(files.steps).toEqual([]);
    await clock.advance(1);
    await waitFor(() => files.appended > 0);
    expect(files.steps).toEqual(['append']);

    carry('third');
    await waitFor(() => clock.pendingTimers > 0);
    // No time passes: the agent's own event, with no record frame to carry it, is written at once.
    await j.durable(j.append(fields('own')));
    expect(files.steps).toEqual(['append', 'append+sync']);
    const { j: again } = await reopen(j);
    expect(again.since(0, undefined, 10).events.map((e) => e.message)).toEqual(['first', 'second', 'third', 'own']);
  });

  it('an event of the agent\'s own waits for the sync of its batch, carried ones written with it too', async () => {
    const { j, files } = await journal();
    const carried = j.reserve(fields('carried'));
    const own = j.append(fields('own'));
    j.carry(carried);
    j.release(carried);
    await j.durable(own);
    expect(sequences(j)).toEqual([1, 2]);
    // One batch of both, synced for the agent's own event; nothing is left for secure() to sync.
    expect(files.steps).toEqual(['append+sync']);
    await j.secure();
    expect(files.steps).toEqual(['append+sync']);
  });

  it('recover() gives back carried events a crash kept out of the segments, in sequence order, skipping those already there', async () => {
    const { j } = await journal();
    const first = j.append(fields('in a segment'));
    await j.flushed();
    const { j: after } = await reopen(j);
    const lost = (sequence: number, message: string): AgentEvent => ({ ...fields(message), sequence });
    after.recover([lost(3, 'third'), first, lost(2, 'second'), { not: 'an event' }]);
    expect(after.since(0, undefined, 10).events.map((e) => e.message)).toEqual(['in a segment', 'second', 'third']);
    expect(after.append(fields('next')).sequence).toBe(4);
    await after.secure();
    const { j: third } = await reopen(after);
    expect(sequences(third)).toEqual([1, 2, 3, 4]);
  });

  it('a failed segment write shows the events from memory and writes them, in order, with the next batch; secure() fails while carried ones are unwritten', async () => {
    const { j, files } = await journal();
    files.failAppends = 3;
    const own = j.append(fields('own'));
    await j.durable(own);
    expect(sequences(j)).toEqual([1]);
    const carried = j.reserve(fields('carried'));
    j.carry(carried);
    j.release(carried);
    // The write carry() schedules fails too, and so does the one secure() makes.
    await expect(j.secure()).rejects.toThrow('the event journal cannot write 1 event the record journal carries');
    await j.secure();
    expect(files.steps).toEqual(['append failed', 'append failed', 'append failed', 'append+sync']);
    const { j: again } = await reopen(j);
    expect(again.since(0, undefined, 10).events.map((e) => e.message)).toEqual(['own', 'carried']);
  });

  it('close() waits for a write holding an event and writes the events after it; a carried event a failed write cancels stays', async () => {
    const { j } = await journal();
    const held = j.reserve(fields('held'));
    j.append(fields('after'));
    const closing = j.close();
    j.carry(held);
    // The store's write failed and its undo too: the frame may be on disk, so the event stays.
    j.cancel(held);
    await closing;
    open.splice(open.indexOf(j), 1);
    const { j: again } = await journal();
    expect(again.since(0, undefined, 10).events.map((e) => e.message)).toEqual(['held', 'after']);
  });

  it('a failed sync of carried events writes them again (Linux may have dropped the pages); the loader keeps each once', async () => {
    const { j, files } = await journal();
    const event = j.reserve(fields('carried'));
    j.carry(event);
    j.release(event);
    files.failSyncs = 1;
    await expect(j.secure()).rejects.toThrow(/EIO/);
    await j.secure();
    expect(files.steps).toEqual(['append', 'sync failed', 'append', 'sync']);
    const { j: again } = await reopen(j);
    expect(again.since(0, undefined, 10).events.map((e) => [e.sequence, e.message])).toEqual([[1, 'carried']]);
    expect(again.append(fields('next')).sequence).toBe(2);
  });
});
