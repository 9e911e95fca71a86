import type { Clock } from '../lifecycle/clock.js';
import type { Logger } from '../logging/logger.js';
import { AgentError, describeError } from '../machine/errors.js';
import type { AttachmentOwner } from '../store/port.js';
import { encodeFrame } from './frame.js';
import { parseStoredEvent, toStoredEvent, type AgentEvent } from './recorded-event.js';
import type { SegmentFiles } from './segment-files.js';

// The ordered event journal: sequence numbers assigned at once, appends written in batches (one
// write and one fdatasync for all events that arrived meanwhile), whole old segments dropped when
// the journal holds more than maxCount events or they are older than maxAgeMs.
//
// An event may also ride in the record store's journal frame with the record change it describes
// (reserve, then carry): it is durable when that frame is, with no sync of its own. Its segment
// write follows unsynced; the store calls secure() before it empties its journal, and recover()
// on load gives back the carried events a crash kept out of the segments.

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

interface Waiter {
  sequence: number;
  resolve: () => void;
}

/**
 * Carried events are durable already: their segment write waits this long for more to join it,
 * so a burst of record writes costs a segment write per interval, not one per record batch. An
 * event that needs its own sync ends the wait at once.
 */
export const CARRIED_WRITE_DELAY_MS = 50;

export const eventsExpired = (why: string) => new AgentError('EventsExpired', `${why}; list again from cursor 0`);

export class EventJournal implements AttachmentOwner {
  /** Every event kept, in sequence order, reserved ones included. */
  private events: AgentEvent[] = [];
  private segments: Segment[] = [];
  private nextSequence = 1;
  /** Events up to this one are on disk: the only ones readers and the sequenced signal see. */
  private durableSequence = 0;
  /** Reserved for a record write not settled yet: invisible, and no segment write passes one. */
  private readonly held = new Set<number>();
  /** On disk in a record-journal frame; their segment write needs no sync until secure(). */
  private readonly carried = new Set<number>();
  /** Carried, but their write's caller has not confirmed yet: shown only after the record change is. */
  private readonly unconfirmed = new Set<number>();
  /** Settled events not in a segment yet, in sequence order. */
  private unwritten: AgentEvent[] = [];
  /** Every event up to here is in a synced segment. */
  private syncedThrough = 0;
  /** Written to the active segment without a sync (carried ones only): written again if a sync fails. */
  private writtenUnsynced: AgentEvent[] = [];
  /** The highest sequence a segment's count includes: one written twice (after a failed sync) counts once. */
  private countedThrough = 0;
  /** Their segment write failed (logged): shown from memory, written again with the next batch. */
  private readonly keptInMemory = new Set<number>();
  /** Segment writes run one after another on this chain. */
  private chain: Promise<unknown> = Promise.resolve();
  private writeScheduled = false;
  /** Ends the wait of a scheduled write of carried events only (see CARRIED_WRITE_DELAY_MS). */
  private hurry: (() => void) | undefined;
  /** The next scheduled write must not wait: an event needs its sync, or secure() or close() wait on it. */
  private urgent = false;
  private closed = false;
  private waiters: Waiter[] = [];
  /** Resolved when no event is held any more (close() waits for calls in flight). */
  private noneHeld: (() => void) | undefined;

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
    this.durableSequence = this.syncedThrough = this.countedThrough = this.nextSequence - 1;
    const last = this.segments.at(-1);
    if (last) await files.activate(last.first);
    else await this.startSegment();
    await this.compact();
  }

  /** Assigns the next sequence and queues the write; never waits. */
  append(event: Omit<AgentEvent, 'sequence'>): AgentEvent {
    const recorded = this.reserve(event);
    this.release(recorded);
    return recorded;
  }

  /**
   * Assigns the next sequence to the event of a record write before the write is made. Until
   * carry(), release() or cancel() it is invisible and holds back the segment writes after it.
   */
  reserve(event: Omit<AgentEvent, 'sequence'>): AgentEvent {
    const recorded: AgentEvent = { sequence: this.nextSequence++, ...event };
    this.events.push(recorded);
    this.held.add(recorded.sequence);
    return recorded;
  }

  /**
   * The record-journal frame holding the event is durable: so is the event. Called by the store
   * inside its commit, before it empties its journal again; the event is shown at release().
   */
  carry(event: AgentEvent): void {
    if (!this.unhold(event)) return;
    this.carried.add(event.sequence);
    this.unconfirmed.add(event.sequence);
    this.queueWrite(event);
  }

  /**
   * The event's record write succeeded and its caller has announced the change: show the event
   * (after its frame, or after the journal's own sync when the store could not carry it).
   */
  release(event: AgentEvent): void {
    if (this.unhold(event)) this.queueWrite(event);
    this.unconfirmed.delete(event.sequence);
    this.advance();
  }

  /**
   * The event's record write failed: a held event never happened (its sequence stays unused). One
   * already carried stays: its frame is on disk after all (a failed write whose undo failed too).
   */
  cancel(event: AgentEvent): void {
    if (!this.unhold(event)) return this.release(event);
    const i = this.indexAfter(event.sequence - 1);
    if (this.events[i]?.sequence === event.sequence) this.events.splice(i, 1);
    this.advance();
    this.scheduleWrite();
  }

  /** Resolves once the event is durable, or gone (cancelled). */
  durable(event: AgentEvent): Promise<void> {
    return this.visibleThrough(event.sequence);
  }

  /** Resolves when every event appended so far is on disk (or its write failed and was logged). */
  flushed(): Promise<void> {
    return this.visibleThrough(this.nextSequence - 1);
  }

  /** For the record store: the carried events its journal's frames still hold, oldest first. */
  recover(entries: unknown[]): void {
    const events = entries.map(toStoredEvent).filter((e): e is AgentEvent => e !== undefined);
    for (const event of events.sort((a, b) => a.sequence - b.sequence)) {
      // Lower ones reached a segment (or were compacted away) before the crash.
      if (event.sequence < this.nextSequence) continue;
      this.events.push(event);
      this.carried.add(event.sequence);
      this.unwritten.push(event);
      this.nextSequence = event.sequence + 1;
    }
    this.advance();
  }

  /** For the record store, before it empties its journal: every carried event reaches a synced segment. */
  secure(): Promise<void> {
    this.writeNow();
    const done = this.chain.then(async () => {
      await this.writeAvailable();
      const firstHeld = this.firstHeld();
      const stranded = this.unwritten.filter((e) => this.carried.has(e.sequence) && e.sequence < firstHeld).length;
      if (stranded > 0) throw new Error(`the event journal cannot write ${stranded} event${stranded === 1 ? '' : 's'} the record journal carries`);
      await this.syncWritten();
    });
    this.chain = done.catch(() => undefined);
    return done;
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

  /** The newest `limit` events, durable or not, oldest first (the unsequenced ListEvents); never a reserved one. */
  recent(limit: number): AgentEvent[] {
    if (this.held.size === 0) return this.events.slice(-limit);
    return this.events.slice(-(limit + this.held.size)).filter((e) => !this.held.has(e.sequence)).slice(-limit);
  }

  get lastSequence(): number {
    return this.durableSequence;
  }

  /**
   * Waits (at most closeWaitMs) for the record writes still holding an event, then writes and
   * syncs every event and closes; events recorded after this stay in memory.
   */
  async close(closeWaitMs = 5000): Promise<void> {
    if (this.held.size > 0) {
      let timer: { cancel(): void } | undefined;
      await new Promise<void>((resolve) => {
        this.noneHeld = resolve;
        timer = this.o.clock.setTimer(closeWaitMs, resolve);
      });
      timer?.cancel();
    }
    this.closed = true;
    this.writeNow();
    const done = this.chain.then(async () => {
      await this.writeAvailable();
      await this.syncWritten().catch((err: unknown) => this.o.logger.error('event journal: final sync failed', { error: describeError(err) }));
      await this.o.files?.close();
    });
    this.chain = done;
    await done;
  }

  private unhold(event: AgentEvent): boolean {
    if (!this.held.delete(event.sequence)) return false;
    if (this.held.size === 0) this.noneHeld?.();
    return true;
  }

  /** Into the write queue, in sequence order (reservations settle nearly in order). */
  private queueWrite(event: AgentEvent): void {
    if (!this.carried.has(event.sequence)) this.writeNow();
    const at = this.unwritten.length;
    this.unwritten.push(event);
    for (let i = at; i > 0 && this.unwritten[i - 1]!.sequence > event.sequence; i--) {
      [this.unwritten[i - 1], this.unwritten[i]] = [event, this.unwritten[i - 1]!];
    }
    this.scheduleWrite();
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

  private firstHeld(): number {
    // A Set iterates in insertion order, and sequences are reserved in increasing order.
    for (const sequence of this.held) return sequence;
    return Number.POSITIVE_INFINITY;
  }

  private isDurable(sequence: number): boolean {
    return sequence <= this.syncedThrough || this.carried.has(sequence) || this.keptInMemory.has(sequence);
  }

  /** Moves the watermark over every durable event, tells of them, and wakes whoever waits. */
  private advance(): void {
    const newly: AgentEvent[] = [];
    for (let i = this.indexAfter(this.durableSequence); i < this.events.length; i++) {
      const event = this.events[i]!;
      if (this.held.has(event.sequence) || this.unconfirmed.has(event.sequence) || !this.isDurable(event.sequence)) break;
      newly.push(event);
    }
    if (newly.length > 0) this.durableSequence = newly.at(-1)!.sequence;
    // Everything below the first event not yet durable is settled (cancelled ones are gone).
    const pendingFrom = this.events[this.indexAfter(this.durableSequence)]?.sequence ?? Number.POSITIVE_INFINITY;
    if (this.waiters.length > 0 && this.waiters[0]!.sequence < pendingFrom) {
      const ready = this.waiters.filter((w) => w.sequence < pendingFrom);
      this.waiters = this.waiters.filter((w) => w.sequence >= pendingFrom);
      for (const w of ready) w.resolve();
    }
    if (newly.length > 0) this.o.onDurable?.(newly);
  }

  private visibleThrough(sequence: number): Promise<void> {
    const pendingFrom = this.events[this.indexAfter(this.durableSequence)]?.sequence ?? Number.POSITIVE_INFINITY;
    if (sequence < pendingFrom) return Promise.resolve();
    return new Promise<void>((resolve) => {
      let at = this.waiters.length;
      while (at > 0 && this.waiters[at - 1]!.sequence > sequence) at--;
      this.waiters.splice(at, 0, { sequence, resolve });
    });
  }

  private get segmentEntries(): number {
    // Ten segments over the retained count: compaction frees a tenth at a time.
    return Math.max(16, Math.ceil(this.o.retention.maxCount / 10));
  }

  private async startSegment(): Promise<void> {
    this.segments.push({ first: this.nextSequence, count: 0, newestAt: 0 });
    await this.o.files?.activate(this.nextSequence);
  }

  private scheduleWrite(): void {
    if (this.writeScheduled || this.closed) return;
    this.writeScheduled = true;
    this.chain = this.chain.then(async () => {
      // One turn of the event loop lets the events of concurrent calls join the batch; carried
      // events, durable already, wait longer for company.
      await new Promise<void>((resolve) => setImmediate(resolve));
      if (!this.urgent && this.unwritten.length > 0 && this.unwritten.every((e) => this.carried.has(e.sequence))) await this.carriedWait();
      this.urgent = false;
      this.writeScheduled = false;
      await this.writeAvailable().catch(() => undefined);
    });
  }

  private writeNow(): void {
    this.urgent = true;
    this.hurry?.();
  }

  private carriedWait(): Promise<void> {
    return new Promise<void>((resolve) => {
      const timer = this.o.clock.setTimer(CARRIED_WRITE_DELAY_MS, () => this.hurry?.());
      this.hurry = () => {
        this.hurry = undefined;
        timer.cancel();
        resolve();
      };
    });
  }

  /** Writes every settled event below the first reserved one, batch by batch; false if a write failed. */
  private async writeAvailable(): Promise<boolean> {
    for (;;) {
      const limit = this.firstHeld();
      let n = 0;
      while (n < this.unwritten.length && this.unwritten[n]!.sequence < limit) n++;
      if (n === 0) return true;
      const batch = this.unwritten.splice(0, n);
      // Only events that are not durable elsewhere make a caller wait for a sync.
      const sync = batch.some((e) => !this.carried.has(e.sequence));
      const last = batch.at(-1)!.sequence;
      try {
        await this.write(batch, sync);
        if (!sync) this.writtenUnsynced.push(...batch);
        else {
          // The file's sync covered every earlier unsynced write too.
          this.writtenUnsynced = [];
          this.markSynced(last);
        }
      } catch (err) {
        if (!batch.every((e) => this.keptInMemory.has(e.sequence) || this.carried.has(e.sequence))) {
          this.o.logger.error('event journal: write failed, events kept in memory until a write succeeds', { error: describeError(err), events: batch.length });
        }
        // Shown from memory (no caller waits on a dead disk); the batch is tried again, in order,
        // with the next, and so are earlier unsynced writes a failed sync may have dropped.
        for (const e of batch) if (!this.carried.has(e.sequence)) this.keptInMemory.add(e.sequence);
        this.unwritten.unshift(...this.writtenUnsynced.splice(0), ...batch);
        this.unwritten.sort((a, b) => a.sequence - b.sequence);
        this.advance();
        return false;
      }
      this.advance();
    }
  }

  private markSynced(through: number): void {
    if (through <= this.syncedThrough) return;
    this.syncedThrough = through;
    for (const held of [this.carried, this.keptInMemory]) {
      for (const sequence of held) {
        if (sequence > through) break;
        held.delete(sequence);
      }
    }
  }

  /** Syncs carried events written without a sync; if that fails, they are written again later. */
  private async syncWritten(): Promise<void> {
    if (this.writtenUnsynced.length === 0) return;
    const written = this.writtenUnsynced.splice(0);
    try {
      await this.o.files?.sync();
    } catch (err) {
      // Linux may have dropped those pages: the loader skips whatever turns out written twice.
      this.unwritten.unshift(...written);
      throw err;
    }
    this.markSynced(written.at(-1)!.sequence);
  }

  private async write(batch: AgentEvent[], sync: boolean): Promise<void> {
    if (this.segments.at(-1)!.count >= this.segmentEntries) {
      // The old segment is closed below: what was written to it unsynced is synced first.
      await this.syncWritten();
      this.segments.push({ first: batch[0]!.sequence, count: 0, newestAt: 0 });
      await this.o.files?.activate(batch[0]!.sequence);
    }
    await this.o.files?.append(Buffer.concat(batch.map((e) => encodeFrame(Buffer.from(JSON.stringify(e), 'utf8')))), sync);
    const active = this.segments.at(-1)!;
    // Compaction drops a segment's count of events from memory: each counts once.
    active.count += batch.filter((e) => e.sequence > this.countedThrough).length;
    this.countedThrough = Math.max(this.countedThrough, batch.at(-1)!.sequence);
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
