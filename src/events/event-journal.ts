import type { Clock } from '../lifecycle/clock.js';
import type { Logger } from '../logging/logger.js';
import { AgentError, describeError } from '../machine/errors.js';
import { encodeFrame } from './frame.js';
import { parseStoredEvent, type AgentEvent } from './recorded-event.js';
import type { SegmentFiles } from './segment-files.js';

// The ordered event journal: sequence numbers assigned at once, appends written in batches (one
// write and one fdatasync for all events that arrived meanwhile), whole old segments dropped when
// the journal holds more than maxCount events or they are older than maxAgeMs.

export interface JournalRetention {
  maxCount: number;
  maxAgeMs: number;
}

export interface EventJournalOptions {
  clock: Clock;
  logger: Logger;
  retention: JournalRetention;
  /** Without files the journal lives in memory only (an agent on fakes). */
  files?: SegmentFiles;
  /** Told of events once they are on disk, in sequence order. */
  onDurable?: (events: AgentEvent[]) => void;
}

export interface EventPage {
  events: AgentEvent[];
  /** The cursor to pass next time: the last sequence this page covers. */
  next: number;
}

interface Segment {
  first: number;
  count: number;
  newestAt: number;
}

interface Batch {
  events: AgentEvent[];
  done: Promise<void>;
  resolve: () => void;
}

export const eventsExpired = (why: string) => new AgentError('EventsExpired', `${why}; list again from cursor 0`);

export class EventJournal {
  private events: AgentEvent[] = [];
  private segments: Segment[] = [];
  private nextSequence = 1;
  /** Events up to this one are on disk: the only ones readers and the sequenced signal see. */
  private durableSequence = 0;
  private pending: Batch | undefined;
  private writing: Batch | undefined;

  constructor(private readonly o: EventJournalOptions) {}

  /** Loads what earlier runs left; the next sequence follows the highest one ever written. */
  async open(): Promise<void> {
    const files = this.o.files;
    if (!files) return this.startSegment();
    for (const loaded of await files.load()) {
      const segment: Segment = { first: loaded.firstSequence, count: 0, newestAt: 0 };
      this.nextSequence = Math.max(this.nextSequence, loaded.firstSequence);
      for (const payload of loaded.payloads) {
        const event = parseStoredEvent(payload);
        if (!event || event.sequence < this.nextSequence) continue;
        this.events.push(event);
        segment.count++;
        segment.newestAt = event.timestamp;
        this.nextSequence = event.sequence + 1;
      }
      this.segments.push(segment);
    }
    this.durableSequence = this.nextSequence - 1;
    const last = this.segments.at(-1);
    if (last) await files.activate(last.first);
    else await this.startSegment();
    await this.compact();
  }

  /** Assigns the next sequence and queues the write; never waits. */
  append(event: Omit<AgentEvent, 'sequence'>): AgentEvent {
    const recorded: AgentEvent = { sequence: this.nextSequence++, ...event };
    this.events.push(recorded);
    if (!this.pending) {
      let resolve!: () => void;
      const done = new Promise<void>((r) => (resolve = r));
      this.pending = { events: [], done, resolve };
      if (!this.writing) void this.writeLoop();
    }
    this.pending.events.push(recorded);
    return recorded;
  }

  /** Resolves when every event appended so far is on disk (or its write failed and was logged). */
  flushed(): Promise<void> {
    return (this.pending ?? this.writing)?.done ?? Promise.resolve();
  }

  /** Durable events after the cursor, for one machine or all, at most `limit`. 0 = from the oldest kept. */
  since(after: number, machine: string | undefined, limit: number): EventPage {
    const last = this.durableSequence;
    const oldest = this.events[0]?.sequence ?? last + 1;
    if (after > last) throw eventsExpired(`cursor ${after} is ahead of the journal's last event ${last}`);
    if (after > 0 && after < oldest - 1) throw eventsExpired(`events after ${after} were compacted away (oldest kept is ${oldest})`);
    const page: AgentEvent[] = [];
    let next = last;
    for (let i = this.indexAfter(after); i < this.events.length; i++) {
      const event = this.events[i]!;
      if (event.sequence > last) break;
      if (machine !== undefined && event.machine !== machine) continue;
      page.push(event);
      if (page.length === limit) {
        next = event.sequence;
        break;
      }
    }
    return { events: page, next: Math.max(next, after) };
  }

  /** The newest `limit` events, durable or not, oldest first (the unsequenced ListEvents). */
  recent(limit: number): AgentEvent[] {
    return this.events.slice(-limit);
  }

  get lastSequence(): number {
    return this.durableSequence;
  }

  async close(): Promise<void> {
    await this.flushed();
    await this.o.files?.close();
  }

  private indexAfter(after: number): number {
    let lo = 0;
    let hi = this.events.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.events[mid]!.sequence <= after) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  private get segmentEntries(): number {
    // Ten segments over the retained count: compaction frees a tenth at a time.
    return Math.max(16, Math.ceil(this.o.retention.maxCount / 10));
  }

  private async startSegment(): Promise<void> {
    this.segments.push({ first: this.nextSequence, count: 0, newestAt: 0 });
    await this.o.files?.activate(this.nextSequence);
  }

  private async writeLoop(): Promise<void> {
    // One turn of the event loop lets the events of concurrent calls join the batch.
    await new Promise<void>((resolve) => setImmediate(resolve));
    while (this.pending) {
      const batch = (this.writing = this.pending);
      this.pending = undefined;
      try {
        await this.write(batch.events);
      } catch (err) {
        this.o.logger.error('event journal: write failed, events kept in memory only', { error: describeError(err), events: batch.events.length });
      }
      this.durableSequence = batch.events.at(-1)!.sequence;
      this.writing = undefined;
      batch.resolve();
      this.o.onDurable?.(batch.events);
    }
  }

  private async write(batch: AgentEvent[]): Promise<void> {
    if (this.segments.at(-1)!.count >= this.segmentEntries) {
      this.segments.push({ first: batch[0]!.sequence, count: 0, newestAt: 0 });
      await this.o.files?.activate(batch[0]!.sequence);
    }
    await this.o.files?.append(Buffer.concat(batch.map((e) => encodeFrame(Buffer.from(JSON.stringify(e), 'utf8')))));
    const active = this.segments.at(-1)!;
    active.count += batch.length;
    active.newestAt = batch.at(-1)!.timestamp;
    await this.compact();
  }

  /** Drops whole segments, oldest first, never the active one. */
  private async compact(): Promise<void> {
    const { maxCount, maxAgeMs } = this.o.retention;
    const cutoff = this.o.clock.now() - maxAgeMs;
    let removed = 0;
    while (this.segments.length > 1) {
      const oldest = this.segments[0]!;
      if (this.events.length - oldest.count < maxCount && oldest.newestAt >= cutoff) break;
      await this.o.files?.remove(oldest.first);
      this.segments.shift();
      this.events.splice(0, oldest.count);
      removed++;
    }
    if (removed > 0) await this.o.files?.syncDir();
  }
}
