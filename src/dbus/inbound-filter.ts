import { createRequire } from 'node:module';
import { Message, MessageType, type MessageBus } from 'dbus-next';
import type { Logger } from '../logging/logger.js';

// dbus-next decodes every incoming body before anyone can look at it: a 29 MB body of the wrong
// type costs seconds of event loop and a gigabyte of objects. This filter sits between the socket
// and dbus-next's parser, reads each message's fixed header and header fields (a few hundred
// bytes), and lets a judge refuse a method call before its body is decoded. A refused call is
// answered with the judge's error at once and handed to dbus-next without its body, disguised as
// a reply nobody waits for, so dbus-next drops it.

/** What the judge sees of an incoming method call: its header, never its body. */
export interface InboundCall {
  path?: string;
  interface?: string;
  member?: string;
  sender?: string;
  signature: string;
  bodyBytes: number;
}

export interface InboundRefusal {
  errorName: string;
  message: string;
}

export type InboundJudge = (call: InboundCall) => InboundRefusal | undefined;

const FIXED_HEADER_BYTES = 16;
const LITTLE_ENDIAN = 0x6c; // 'l'

interface DBusBufferLike {
  readArray(type: unknown, bytes: number): Array<[number, [unknown, [unknown]]]>;
}
const requireDbus = createRequire(import.meta.url);
const DBusBuffer = requireDbus('dbus-next/lib/dbus-buffer') as new (buf: Buffer, start: number, endian: number, fds: null, opts: object) => DBusBufferLike;
const HEADER_FIELDS_TYPE = (requireDbus('dbus-next/lib/header-signature.json') as Array<{ child: unknown[] }>)[0]!.child[0];
const FIELD_NAMES = (requireDbus('dbus-next/lib/constants') as { headerTypeName: (string | null)[] }).headerTypeName;

const pad8 = (n: number) => (n + 7) & ~7;

interface Readable {
  read(size?: number): Buffer | null;
}

const FILTERED = Symbol.for('vmkeeper.dbus.inboundFilter');

/**
 * Installs the filter on the bus's socket. Call it before the first message could be half-read
 * (right after connecting): it relies on the parser asking for 16 header bytes, then the rest.
 */
export function filterInbound(bus: MessageBus, judge: InboundJudge, logger: Logger): void {
  const stream = (bus as unknown as { _connection?: { stream?: Readable } })._connection?.stream;
  if (!stream || typeof stream.read !== 'function') throw new Error('cannot filter this D-Bus connection: no readable socket');
  const marked = stream as Readable & { [FILTERED]?: true };
  if (marked[FILTERED]) return;
  marked[FILTERED] = true;
  const read = stream.read.bind(stream);
  const refusals = new RefusalLog(logger);
  let header: Buffer | null = null;
  let rest: Buffer | undefined;

  stream.read = (size?: number): Buffer | null => {
    // The parser's second read of a message: hand over what the first read set aside.
    if (rest !== undefined) {
      const out = rest;
      rest = undefined;
      return out;
    }
    if (size !== FIXED_HEADER_BYTES) return read(size);
    header ??= read(FIXED_HEADER_BYTES);
    if (!header) return null;
    const le = header[0] === LITTLE_ENDIAN;
    const bodyBytes = le ? header.readUInt32LE(4) : header.readUInt32BE(4);
    const fieldsBytes = le ? header.readUInt32LE(12) : header.readUInt32BE(12);
    const whole = read(pad8(fieldsBytes) + bodyBytes);
    // Not all here yet: keep the header and wait; the socket's next chunk raises 'readable' again.
    if (!whole) return null;
    const fixed = header;
    header = null;
    if (fixed[1] !== MessageType.METHOD_CALL || bodyBytes === 0) {
      rest = whole;
      return fixed;
    }
    let fields: Partial<Record<string, string>>;
    try {
      fields = readFields(whole, fixed[0]!, fieldsBytes);
    } catch {
      // The bus validates headers, so this does not happen; if it did, dbus-next decides as before.
      rest = whole;
      return fixed;
    }
    const call: InboundCall = { ...fields, signature: fields.signature ?? '', bodyBytes };
    const refusal = judge(call);
    if (!refusal) {
      rest = whole;
      return fixed;
    }
    refusals.note(call, refusal);
    const serial = le ? fixed.readUInt32LE(8) : fixed.readUInt32BE(8);
    if ((fixed[2]! & 0x1) === 0 && call.sender) {
      // NO_REPLY_EXPECTED is flag 0x1; every other caller is told why.
      bus.send(new Message({ type: MessageType.ERROR, replySerial: serial as unknown as string, destination: call.sender, errorName: refusal.errorName, signature: 's', body: [refusal.message] }));
    }
    const disguised = Buffer.from(fixed);
    disguised[1] = MessageType.METHOD_RETURN;
    if (le) disguised.writeUInt32LE(0, 4);
    else disguised.writeUInt32BE(0, 4);
    rest = whole.subarray(0, pad8(fieldsBytes));
    return disguised;
  };
}

function readFields(whole: Buffer, endian: number, fieldsBytes: number): Partial<Record<string, string>> {
  const out: Partial<Record<string, string>> = {};
  const fields = new DBusBuffer(whole, 0, endian, null, {}).readArray(HEADER_FIELDS_TYPE, fieldsBytes);
  for (const [code, [, [value]]] of fields) {
    const name = FIELD_NAMES[code];
    if (name && typeof value === 'string') out[name] = value;
  }
  return out;
}

const LOG_EVERY = 100;
const MAX_SENDERS = 1000;

/** One warning for a sender's first refusal and one per hundred after, so a flood cannot flood the journal. */
class RefusalLog {
  private readonly counts = new Map<string, number>();

  constructor(private readonly logger: Logger) {}

  note(call: InboundCall, refusal: InboundRefusal): void {
    const sender = call.sender ?? '(unknown)';
    if (this.counts.size >= MAX_SENDERS && !this.counts.has(sender)) this.counts.clear();
    const count = (this.counts.get(sender) ?? 0) + 1;
    this.counts.set(sender, count);
    if (count === 1 || count % LOG_EVERY === 0) {
      this.logger.warn('D-Bus call refused before decoding its body', {
        sender,
        member: `${call.interface ?? ''}.${call.member ?? ''}`,
        signature: call.signature,
        bodyBytes: call.bodyBytes,
        error: refusal.errorName,
        refusedFromSender: count,
      });
    }
  }
}
