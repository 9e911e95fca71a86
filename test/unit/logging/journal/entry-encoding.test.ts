import { describe, expect, it } from 'vitest';
import { encodeJournalEntry, journalFieldName } from '../../../../src/logging/journal/entry-encoding.js';

/** Reads a datagram back the way journald does (journal-file format of the native protocol). */
function decode(datagram: Buffer): Array<[string, string]> {
  const out: Array<[string, string]> = [];
  let at = 0;
  while (at < datagram.length) {
    const eol = datagram.indexOf(0x0a, at);
    const line = datagram.subarray(at, eol).toString('utf8');
    const eq = line.indexOf('=');
    if (eq >= 0) {
      out.push([line.slice(0, eq), line.slice(eq + 1)]);
      at = eol + 1;
      continue;
    }
    const length = Number(datagram.readBigUInt64LE(eol + 1));
    const start = eol + 9;
    out.push([line, datagram.subarray(start, start + length).toString('utf8')]);
    expect(datagram[start + length], 'a binary value ends with a newline').toBe(0x0a);
    at = start + length + 1;
  }
  return out;
}

describe('encodeJournalEntry', () => {
  it('writes single-line values as FIELD=value lines', () => {
    const d = encodeJournalEntry([['MESSAGE', 'web-1: created'], ['PRIORITY', '6']]);
    expect(d.toString('utf8')).toBe('MESSAGE=web-1: created\nPRIORITY=6\n');
  });

  it('writes a multi-line value in the binary form: name, 64-bit little-endian length, bytes', () => {
    const value = 'first line\nsecond line=with equals\n';
    const d = encodeJournalEntry([['MESSAGE', value], ['PRIORITY', '3']]);
    const expected = Buffer.concat([
      Buffer.from('MESSAGE\n'),
      Buffer.from([value.length, 0, 0, 0, 0, 0, 0, 0]),
      Buffer.from(value),
      Buffer.from('\nPRIORITY=3\n'),
    ]);
    expect(d.equals(expected)).toBe(true);
    expect(decode(d)).toEqual([['MESSAGE', value], ['PRIORITY', '3']]);
  });

  it('counts bytes, not characters, in the binary length', () => {
    const value = 'größe\nüber';
    const d = encodeJournalEntry([['VMKEEPER_NOTE', value]]);
    expect(d.readBigUInt64LE('VMKEEPER_NOTE\n'.length)).toBe(BigInt(Buffer.byteLength(value)));
    expect(decode(d)).toEqual([['VMKEEPER_NOTE', value]]);
  });

  it('keeps an empty value and a value with "=" intact', () => {
    expect(decode(encodeJournalEntry([['A', ''], ['B', 'x=y']]))).toEqual([['A', ''], ['B', 'x=y']]);
  });
});

describe('journalFieldName', () => {
  it.each([
    ['machine', 'MACHINE'],
    ['stateDir', 'STATE_DIR'],
    ['prepareForShutdown', 'PREPARE_FOR_SHUTDOWN'],
    ['dotted.key-name', 'DOTTED_KEY_NAME'],
    ['_SYSTEMD_UNIT', 'SYSTEMD_UNIT'],
    ['9lives', 'LIVES'],
    ['ümlaut', 'MLAUT'],
    ['x'.repeat(80), 'X'.repeat(64)],
  ])('%s -> %s', (raw, name) => {
    expect(journalFieldName(raw)).toBe(name);
  });

  it.each(['', '___', '123', '-'])('%j has no usable name', (raw) => {
    expect(journalFieldName(raw)).toBeUndefined();
  });
});
