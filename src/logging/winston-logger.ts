import winston from 'winston';
import { formatFields, toJson } from './format-fields.js';
import type { LogFields, Logger } from './logger.js';
import { encodeJournalEntry } from './journal/entry-encoding.js';
import { journalEntryFields, SYSLOG_PRIORITY } from './journal/entry-fields.js';
import type { DatagramSender } from './journal/journal-socket.js';

// The agent's Logger on winston, writing one line per entry to stderr (journald takes stderr
// under systemd), or, given a journal socket, one native entry with fields (journal/).
// Fields travel under info.fields so they can never clobber level or message.

export type LogLevel = 'error' | 'warn' | 'info' | 'debug';
export type LogFormat = 'journal' | 'text' | 'json';

export interface CreateLoggerOptions {
  level: LogLevel;
  format: LogFormat;
  /** Where lines go; tests pass a capture stream. Default process.stderr. */
  stream?: NodeJS.WritableStream;
  /** Time source for text/json timestamps; tests pin it. */
  now?: () => Date;
  /** With format "journal": entries go as native datagrams; an entry that cannot goes to the stream. */
  journal?: DatagramSender;
}

export type ClosableLogger = Logger & { close(): Promise<void> };

const LEVELS = { error: 0, warn: 1, info: 2, debug: 3 } as const;
const MESSAGE = Symbol.for('message');

interface Entry {
  level: LogLevel;
  message: string;
  fields?: LogFields;
  [MESSAGE]?: string;
}

/** One line, so an embedded newline can never split an entry (journald would see two). */
const oneLine = (s: string) => s.replace(/\r?\n/g, '\\n');

function render(format: LogFormat, entry: Entry, now: () => Date): string {
  const { level, message, fields } = entry;
  switch (format) {
    case 'journal':
      // sd-daemon(3) priority prefixes: journald strips them and sets PRIORITY.
      return `<${SYSLOG_PRIORITY[level]}>${oneLine(message)}${formatFields(fields)}`;
    case 'text':
      return `${now().toISOString()} ${level.toUpperCase().padEnd(5)} ${oneLine(message)}${formatFields(fields)}`;
    case 'json':
      // Fields first, so "time", "level" and "msg" always mean what they say.
      return toJson({ ...fields, time: now().toISOString(), level, msg: message });
  }
}

export function createLogger(options: CreateLoggerOptions): ClosableLogger {
  const now = options.now ?? (() => new Date());
  const stream = options.stream ?? process.stderr;
  const lineFormat = winston.format((info) => {
    const entry = info as unknown as Entry;
    entry[MESSAGE] = render(options.format, entry, now);
    return info;
  });
  const logger = winston.createLogger({
    levels: LEVELS,
    level: options.level,
    format: lineFormat(),
    transports: [new winston.transports.Stream({ stream, eol: '\n' })],
    exitOnError: false,
  });
  let closed: Promise<void> | undefined;
  const journal = options.format === 'journal' ? options.journal : undefined;
  const log = (level: LogLevel) => (message: string, fields?: LogFields) => {
    // A late line from a component still stopping must not become a write-after-end error.
    if (closed) return;
    const asLine = () => logger.log({ level, message, fields });
    if (!journal || LEVELS[level] > LEVELS[options.level]) return asLine();
    let datagram: Buffer;
    try {
      datagram = encodeJournalEntry(journalEntryFields(level, message, fields));
    } catch {
      return asLine(); // a value no encoding takes must not cost the entry
    }
    journal.send(datagram, asLine);
  };
  return {
    error: log('error'),
    warn: log('warn'),
    info: log('info'),
    debug: log('debug'),
    close() {
      // Entries still queued for the journal become stream lines before the stream ends.
      if (!closed) journal?.close();
      closed ??= new Promise<void>((resolve) => {
        logger.once('finish', () => {
          // The transport has handed every line to the stream; wait for the stream to take them.
          stream.write('', () => resolve());
        });
        logger.end();
      });
      return closed;
    },
  };
}
