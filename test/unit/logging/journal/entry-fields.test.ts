import { describe, expect, it } from 'vitest';
import { journalEntryFields } from '../../../../src/logging/journal/entry-fields.js';
import { EVENT_MESSAGE_IDS } from '../../../../src/logging/journal/message-ids.js';

describe('journalEntryFields', () => {
  it('an event line carries machine, reason, sequence, caller and its MESSAGE_ID; MESSAGE reads like the stream line', () => {
    const fields = journalEntryFields('info', 'web-1: machine web-1 created', { machine: 'web-1', reason: 'Created', sequence: 7, uid: 1000, call: 'CreateMachine' });
    expect(fields).toEqual([
      ['MESSAGE', 'web-1: machine web-1 created machine=web-1 reason=Created sequence=7 uid=1000 call=CreateMachine'],
      ['PRIORITY', '6'],
      ['SYSLOG_IDENTIFIER', 'vmkeeperd'],
      ['MESSAGE_ID', EVENT_MESSAGE_IDS.Created],
      ['VMKEEPER_MACHINE', 'web-1'],
      ['VMKEEPER_REASON', 'Created'],
      ['VMKEEPER_EVENT_SEQ', '7'],
      ['VMKEEPER_CALLER_UID', '1000'],
      ['VMKEEPER_CALLER_CALL', 'CreateMachine'],
    ]);
  });

  it('the agent\'s own event has no caller uid', () => {
    const fields = journalEntryFields('warn', 'db: guest ignored ACPI', { machine: 'db', reason: 'ForceStopped', sequence: 9, by: 'agent' });
    const names = fields.map(([n]) => n);
    expect(names).not.toContain('VMKEEPER_CALLER_UID');
    expect(fields).toContainEqual(['PRIORITY', '4']);
    expect(fields).toContainEqual(['VMKEEPER_BY', 'agent']);
    expect(fields).toContainEqual(['MESSAGE_ID', EVENT_MESSAGE_IDS.ForceStopped]);
  });

  it('a plain line has no MESSAGE_ID; other fields become VMKEEPER_* with unquoted values', () => {
    const fields = journalEntryFields('debug', 'opened a libvirt connection', { uri: 'qemu:///system', stateDir: '/var/lib/x y', error: new Error('boom\nstack'), gone: undefined });
    expect(fields).toEqual([
      ['MESSAGE', 'opened a libvirt connection uri=qemu:///system stateDir="/var/lib/x y" error=boom'],
      ['PRIORITY', '7'],
      ['SYSLOG_IDENTIFIER', 'vmkeeperd'],
      ['VMKEEPER_URI', 'qemu:///system'],
      ['VMKEEPER_STATE_DIR', '/var/lib/x y'],
      ['VMKEEPER_ERROR', 'boom'],
    ]);
  });

  it('a reason outside the table, or a reason without a sequence, gets no MESSAGE_ID', () => {
    expect(journalEntryFields('info', 'x', { reason: 'SomethingNew', sequence: 1 }).map(([n]) => n)).not.toContain('MESSAGE_ID');
    expect(journalEntryFields('info', 'x', { reason: 'Created' }).map(([n]) => n)).not.toContain('MESSAGE_ID');
  });

  it('keeps a multi-line message whole (the datagram carries it in the binary form)', () => {
    expect(journalEntryFields('error', 'line one\nline two')[0]).toEqual(['MESSAGE', 'line one\nline two']);
  });

  it('drops a field whose name has nothing usable', () => {
    expect(journalEntryFields('info', 'x', { '--': 1 }).map(([n]) => n)).toEqual(['MESSAGE', 'PRIORITY', 'SYSLOG_IDENTIFIER']);
  });
});
