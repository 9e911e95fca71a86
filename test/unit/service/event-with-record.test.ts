import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { EventJournal } from '../../../src/events/event-journal.js';
import { SegmentFiles } from '../../../src/events/segment-files.js';
import { TypedEmitter } from '../../../src/lifecycle/emitter.js';
import { silentLogger } from '../../../src/logging/logger.js';
import type { MachineApiEvents } from '../../../src/service/api.js';
import { EventLog } from '../../../src/service/event-log.js';
import { MachineRecords } from '../../../src/service/machine-records.js';
import { FakeClock } from '../../support/fakes/fake-clock.js';
import { countingJournalSyncs, makeRecord, newTestStore, useTempStateDir } from '../../support/records.js';

// A call's record change and its event are durable with one sync (the record journal's): the
// event rides in the change's frame. A power cut that loses the event journal's unsynced write
// loses no event: the restart takes it back from the record journal.

const paths = useTempStateDir();

/**
 * Segment files as a power cut sees them: an unsynced append reaches the disk only with the next
 * sync (fdatasync writes every earlier append of the file too); counts the syncs.
 */
class PowerCutSegments extends SegmentFiles {
  syncs = 0;
  private unsynced: Buffer[] = [];
  override async append(frames: Buffer, sync = true): Promise<void> {
    if (!sync) return void this.unsynced.push(frames);
    this.syncs++;
    await super.append(Buffer.concat([...this.unsynced.splice(0), frames]), true);
  }
  override async sync(): Promise<void> {
    this.syncs++;
    if (this.unsynced.length > 0) await super.append(Buffer.concat(this.unsynced.splice(0)), true);
  }
}

async function openAgentParts(segments: SegmentFiles, countRecordSyncs?: () => void) {
  const clock = new FakeClock();
  const journal = new EventJournal({ clock, logger: silentLogger, retention: { maxCount: 1000, maxAgeMs: 7 * 24 * 3600 * 1000 }, files: segments });
  const { store } = newTestStore(paths.dir, {
    journalFile: path.join(paths.root, 'journal', 'records.log'),
    fs: countingJournalSyncs(() => countRecordSyncs?.()),
  });
  store.carryAttachmentsOf(journal);
  const emitter = new TypedEmitter<MachineApiEvents>();
  const records = new MachineRecords(store, new EventLog(clock, silentLogger, () => undefined, journal), emitter);
  await journal.open();
  await store.load();
  return { journal, store, records };
}

describe('a record change and its event, durable with one sync', () => {
  it('one record-journal sync per call and none of the event journal; the event is listed at the answer', async () => {
    let recordSyncs = 0;
    const segments = new PowerCutSegments(path.join(paths.root, 'events'), silentLogger);
    const { journal, records } = await openAgentParts(segments, () => recordSyncs++);
    await records.create('web-1', () => makeRecord('web-1'), (r) => r, () => ({ type: 'normal', reason: 'Created', message: 'created' }));
    const before = { record: recordSyncs, events: segments.syncs };
    for (let i = 0; i < 5; i++) {
      await records.update('web-1', (r) => void (r.annotations = { n: String(i) }), () => ({ type: 'normal', reason: 'AnnotationsChanged', message: `n=${i}` }));
      expect(journal.since(0, 'web-1', 100).events.at(-1)?.message).toBe(`n=${i}`);
    }
    expect(recordSyncs - before.record).toBe(5);
    expect(segments.syncs - before.events).toBe(0);
  });

  it('after a power cut that lost the event journal\'s unsynced writes, a restart lists every answered event', async () => {
    const { journal, records } = await openAgentParts(new PowerCutSegments(path.join(paths.root, 'events'), silentLogger));
    await records.create('web-1', () => makeRecord('web-1'), (r) => r, () => ({ type: 'normal', reason: 'Created', message: 'created' }));
    await records.update('web-1', (r) => void (r.spec.power = 'off'), () => ({ type: 'normal', reason: 'PowerChanged', message: 'power set to off' }));
    records.event('web-1', 'normal', 'Test', 'an event of the agent\'s own');
    await journal.flushed();
    await records.update('web-1', (r) => void (r.annotations = { a: 'b' }), () => ({ type: 'normal', reason: 'AnnotationsChanged', message: 'annotations replaced' }));
    const answered = journal.since(0, undefined, 100).events;
    expect(answered.map((e) => e.reason)).toEqual(['Created', 'PowerChanged', 'Test', 'AnnotationsChanged']);

    // The restart: nothing was closed; the segments hold only what was synced.
    const after = await openAgentParts(new SegmentFiles(path.join(paths.root, 'events'), silentLogger));
    expect(after.journal.since(0, undefined, 100).events).toEqual(answered);
    expect(after.store.get('web-1')?.annotations).toEqual({ a: 'b' });
    await after.journal.close();
    // The load's checkpoint emptied the record journal only after the events reached a segment.
    const third = await openAgentParts(new SegmentFiles(path.join(paths.root, 'events'), silentLogger));
    expect(third.journal.since(0, undefined, 100).events).toEqual(answered);
    expect(third.journal.append({ timestamp: 0, machine: 'web-1', type: 'normal', reason: 'Test', message: 'next' }).sequence).toBe(5);
    await third.journal.close();
  });
});
