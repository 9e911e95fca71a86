import { formatFields, formatValue } from '../format-fields.js';
import type { LogFields } from '../logger.js';
import { journalFieldName, type JournalFields } from './entry-encoding.js';
import { eventMessageId } from './message-ids.js';

// What one log entry becomes in the journal: MESSAGE reads as the stream line does, and each
// field is also a VMKEEPER_* journal field, so `journalctl VMKEEPER_MACHINE=web-1` filters on it.

export type JournalLevel = 'error' | 'warn' | 'info' | 'debug';

export const SYSLOG_IDENTIFIER = 'vmkeeperd';
/** sd-daemon(3) / syslog priorities. */
export const SYSLOG_PRIORITY: Record<JournalLevel, number> = { error: 3, warn: 4, info: 6, debug: 7 };

/** The event log's field names, given the journal names the documentation promises. */
const NAMED: Readonly<Record<string, string>> = {
  machine: 'VMKEEPER_MACHINE',
  reason: 'VMKEEPER_REASON',
  sequence: 'VMKEEPER_EVENT_SEQ',
  uid: 'VMKEEPER_CALLER_UID',
  call: 'VMKEEPER_CALLER_CALL',
};

/** A field's value without the quoting the one-line text needs. */
function plainValue(value: unknown): string {
  if (typeof value === 'string') return value;
  const shown = formatValue(value);
  return shown.startsWith('"') ? (JSON.parse(shown) as string) : shown;
}

export function journalEntryFields(level: JournalLevel, message: string, fields?: LogFields): JournalFields {
  const out: Array<[string, string]> = [
    ['MESSAGE', `${message}${formatFields(fields)}`],
    ['PRIORITY', String(SYSLOG_PRIORITY[level])],
    ['SYSLOG_IDENTIFIER', SYSLOG_IDENTIFIER],
  ];
  const messageId = fields?.sequence !== undefined ? eventMessageId(fields.reason) : undefined;
  if (messageId) out.push(['MESSAGE_ID', messageId]);
  for (const [key, value] of Object.entries(fields ?? {})) {
    if (value === undefined) continue;
    const sanitised = journalFieldName(key);
    const name = NAMED[key] ?? (sanitised && `VMKEEPER_${sanitised}`.slice(0, 64));
    if (name) out.push([name, plainValue(value)]);
  }
  return out;
}
