import { describe, expect, it } from 'vitest';
import { decodeJournal, encodeBatch } from '../../../src/store/record-journal.js';
import { makeRecord } from '../../support/records.js';

// Journal framing: whole frames decode back; a torn or damaged tail is dropped with what follows.

const batchA = [{ name: 'a', record: makeRecord('a') }, { name: 'b', record: null }];
const batchB = [{ name: 'c', record: makeRecord('c', { annotations: { note: 'é ✓' } }) }];

describe('journal framing', () => {
  it('decodes consecutive frames to the batches written', () => {
    const buf = Buffer.concat([encodeBatch(batchA), encodeBatch(batchB)]);
    const decoded = decodeJournal(buf);
    expect(decoded.batches).toEqual([batchA, batchB]);
    expect(decoded.validBytes).toBe(buf.length);
  });

  it('drops a torn last frame, cut at any byte, and keeps the frames before it', () => {
    const first = encodeBatch(batchA);
    const second = encodeBatch(batchB);
    for (let cut = 0; cut < second.length; cut++) {
      const decoded = decodeJournal(Buffer.concat([first, second.subarray(0, cut)]));
      expect(decoded.batches).toEqual([batchA]);
      expect(decoded.validBytes).toBe(first.length);
    }
  });

  it('stops at a frame whose payload fails its checksum', () => {
    const first = encodeBatch(batchA);
    const second = Buffer.from(encodeBatch(batchB));
    second[second.length - 3] ^= 0x01;
    const decoded = decodeJournal(Buffer.concat([first, second, encodeBatch(batchA)]));
    expect(decoded.batches).toEqual([batchA]);
    expect(decoded.validBytes).toBe(first.length);
  });

  it('reads nothing from zeros or foreign bytes', () => {
    expect(decodeJournal(Buffer.alloc(64)).batches).toEqual([]);
    expect(decodeJournal(Buffer.from('{"not":"a journal"}')).validBytes).toBe(0);
  });
});
