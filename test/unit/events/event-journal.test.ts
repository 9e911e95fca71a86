import { promises as fs } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { EventJournal, type JournalRetention } from '../../../src/events/event-journal.js';
import { SegmentFiles } from '../../../src/events/segment-files.js';
import type { AgentEvent } from '../../../src/events/recorded-event.js';
import { silentLogger } from '../../../src/logging/logger.js';
import { FakeClock } from '../../support/fakes/fake-clock.js';

const DAY = 24 * 3600 * 1000;

describe('event journal', () => {
  let dir: string;
  let clock: FakeClock;
  const open: EventJournal[] = [];

  beforeEach(async () => {
    dir = await fs.mkdtemp(path.join(os.tmpdir(), 'journal-'));
    clock = new FakeClock();
  });
  afterEach(async () => {
    for (const j of open.splice(0)) await j.close();
    await fs.rm(dir, { recursive: true, force: true });
  });

  async function journal(retention: JournalRetention = { maxCount: 1000, maxAgeMs: 7 * DAY }, durable: AgentEvent[] = []): Promise<EventJournal> {
    const j = new EventJournal({ clock, logger: silentLogger, retention, files: new SegmentFiles(dir, silentLogger), onDurable: (b) => durable.push(...b) });
    open.push(j);
    await j.open();
    return j;
  }

  async function append(j: EventJournal, n: number, machine = 'web-1'): Promise<void> {
    for (let i = 0; i < n; i++) j.append({ timestamp: clock.now(), machine, type: 'normal', reason: 'Test', message: `event ${i}` });
    await j.flushed();
  }

  async function reopen(j: EventJournal, retention?: JournalRetention): Promise<EventJournal> {
    await j.close();
    open.splice(open.indexOf(j), 1);
    return journal(retention);
  }

  it('numbers events 1, 2, 3 and carries on after a restart', async () => {
    let j = await journal();
    await append(j, 3);
    j = await reopen(j);
    await append(j, 2);
    expect(j.since(0, undefined, 100).events.map((e) => e.sequence)).toEqual([1, 2, 3, 4, 5]);
  });

  it('writes concurrent appends as one batch and tells of them only once they are on disk', async () => {
    const durable: AgentEvent[] = [];
    const j = await journal(undefined, durable);
    for (let i = 0; i < 50; i++) j.append({ timestamp: clock.now(), machine: 'a', type: 'normal', reason: 'Test', message: '' });
    expect(j.since(0, undefined, 100).events).toEqual([]);
    expect(durable).toEqual([]);
    await j.flushed();
    expect(durable.map((e) => e.sequence)).toEqual(Array.from({ length: 50 }, (_, i) => i + 1));
    expect(j.since(0, undefined, 100).events).toHaveLength(50);
  });

  it('drops a torn tail at load and appends after the last whole event', async () => {
    let j = await journal();
    await append(j, 3);
    await j.close();
    const [file] = await fs.readdir(dir);
    const data = await fs.readFile(path.join(dir, file!));
    await fs.writeFile(path.join(dir, file!), data.subarray(0, data.length - 5));
    open.splice(0);
    j = await journal();
    await append(j, 1);
    expect(j.since(0, undefined, 100).events.map((e) => [e.sequence, e.message])).toEqual([[1, 'event 0'], [2, 'event 1'], [3, 'event 0']]);
  });

  it('pages a bounded number of events with the cursor to continue from, per machine or all', async () => {
    const j = await journal();
    for (let i = 0; i < 10; i++) j.append({ timestamp: clock.now(), machine: i % 2 ? 'odd' : 'even', type: 'normal', reason: 'Test', message: `${i}` });
    await j.flushed();
    const first = j.since(0, 'odd', 3);
    expect(first.events.map((e) => e.sequence)).toEqual([2, 4, 6]);
    expect(first.next).toBe(6);
    const rest = j.since(first.next, 'odd', 3);
    expect(rest.events.map((e) => e.sequence)).toEqual([8, 10]);
    expect(rest.next).toBe(10);
    expect(j.since(10, undefined, 3)).toEqual({ events: [], next: 10 });
  });

  it('compacts whole segments past the count, keeps at least maxCount, and expires older cursors', async () => {
    let j = await journal({ maxCount: 100, maxAgeMs: 7 * DAY });
    for (let i = 0; i < 25; i++) await append(j, 10);
    const kept = j.since(0, undefined, 1000).events;
    expect(kept.length).toBeGreaterThanOrEqual(100);
    expect(kept.length).toBeLessThan(250);
    expect(kept.at(-1)!.sequence).toBe(250);
    const oldest = kept[0]!.sequence;
    expect(() => j.since(oldest - 2, undefined, 10)).toThrow(expect.objectContaining({ kind: 'EventsExpired' }));
    expect(j.since(oldest - 1, undefined, 10).events[0]!.sequence).toBe(oldest);
    j = await reopen(j, { maxCount: 100, maxAgeMs: 7 * DAY });
    expect(j.since(0, undefined, 1000).events[0]!.sequence).toBe(oldest);
    expect((await fs.readdir(dir)).length).toBeLessThan(25);
  });

  it('drops segments older than maxAge as time passes, never the newest, so the sequence carries on', async () => {
    let j = await journal({ maxCount: 100, maxAgeMs: DAY });
    for (let i = 0; i < 5; i++) await append(j, 20);
    await clock.advance(2 * DAY);
    j = await reopen(j, { maxCount: 100, maxAgeMs: DAY });
    const left = j.since(0, undefined, 1000);
    expect(left.events.length).toBeLessThanOrEqual(20);
    expect(() => j.since(1, undefined, 10)).toThrow(expect.objectContaining({ kind: 'EventsExpired' }));
    await append(j, 1);
    expect(j.since(100, undefined, 10).events.map((e) => e.sequence)).toEqual([101]);
  });

  it('refuses a cursor from the future by name', async () => {
    const j = await journal();
    await append(j, 2);
    expect(() => j.since(3, undefined, 10)).toThrow(expect.objectContaining({ kind: 'EventsExpired', message: expect.stringContaining('ahead') }));
  });
});
