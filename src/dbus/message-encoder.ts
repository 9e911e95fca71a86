import { Variant } from 'dbus-next';

// A lean D-Bus marshaller (little-endian) for the messages the agent sends. dbus-next builds every
// message through a tree of small buffers and re-parses each signature on each send; with several
// signals per acknowledged write that was the largest part of a write's CPU time and garbage. This
// writes header and body into one buffer from cached signature trees.
//
// It takes the values dbus-next takes, and only those it can encode exactly as dbus-next would:
// anything else (a file descriptor, a Buffer where a string is expected, a Variant where a plain
// value is expected...) returns undefined and the caller sends the message through dbus-next,
// whose behaviour and errors then apply unchanged. The unit test compares the bytes with
// dbus-next's for every signature of the agent's interfaces.

type TypeCode = 'y' | 'b' | 'n' | 'q' | 'i' | 'u' | 'x' | 't' | 'd' | 's' | 'o' | 'g' | 'h' | 'v' | 'a' | '(' | '{';

interface TypeNode {
  code: TypeCode;
  children: TypeNode[];
  /** Alignment of the type's first byte. */
  align: number;
}

const BASIC_ALIGN: Record<string, number> = { y: 1, b: 4, n: 2, q: 2, i: 4, u: 4, x: 8, t: 8, d: 8, s: 4, o: 4, g: 1, h: 4, v: 1 };
const MAX_SIGNATURE = 255;

/** Thrown inside the encoder for a value it leaves to dbus-next. */
class NotEncodable extends Error {}
const notEncodable = new NotEncodable();

const parsed = new Map<string, TypeNode[] | null>();

/** The complete types of a signature, or null if it is not one this encoder parses. */
function parseSignature(signature: string): TypeNode[] | null {
  const cached = parsed.get(signature);
  if (cached !== undefined) return cached;
  let at = 0;
  const one = (depth: number): TypeNode => {
    if (depth > 64 || at >= signature.length) throw notEncodable;
    const c = signature[at++]!;
    if (c === 'a') {
      const child = one(depth + 1);
      return { code: 'a', children: [child], align: 4 };
    }
    if (c === '(' || c === '{') {
      const close = c === '(' ? ')' : '}';
      const children: TypeNode[] = [];
      while (signature[at] !== close) children.push(one(depth + 1));
      at++;
      if (children.length === 0 || (c === '{' && children.length !== 2)) throw notEncodable;
      return { code: c, children, align: 8 };
    }
    const align = BASIC_ALIGN[c];
    if (align === undefined) throw notEncodable;
    return { code: c as TypeCode, children: [], align };
  };
  let types: TypeNode[] | null;
  try {
    types = [];
    while (at < signature.length) types.push(one(0));
  } catch {
    types = null;
  }
  if (parsed.size > 1000) parsed.clear(); // signatures come from variants too; keep the cache bounded
  parsed.set(signature, types);
  return types;
}

class Writer {
  buf: Buffer;
  at = 0;

  constructor(size: number) {
    this.buf = Buffer.allocUnsafe(size);
  }

  ensure(bytes: number): void {
    if (this.at + bytes <= this.buf.length) return;
    const next = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.at + bytes));
    this.buf.copy(next, 0, 0, this.at);
    this.buf = next;
  }

  align(n: number): void {
    const pad = (n - (this.at % n)) % n;
    if (pad === 0) return;
    this.ensure(pad);
    this.buf.fill(0, this.at, this.at + pad);
    this.at += pad;
  }

  u8(v: number): void {
    this.ensure(1);
    this.buf[this.at++] = v;
  }

  /** A fixed-size number, aligned to its own size. */
  fixed(size: number, write: (buf: Buffer, at: number) => unknown): void {
    this.align(size);
    this.ensure(size);
    write(this.buf, this.at);
    this.at += size;
  }

  u32(v: number): void {
    this.fixed(4, (buf, at) => buf.writeUInt32LE(v, at));
  }

  string(s: string): void {
    if (s.includes('\0')) throw notEncodable;
    this.align(4);
    const bytes = Buffer.byteLength(s, 'utf8');
    this.ensure(bytes + 5);
    this.buf.writeUInt32LE(bytes, this.at);
    this.buf.write(s, this.at + 4, 'utf8');
    this.buf[this.at + 4 + bytes] = 0;
    this.at += bytes + 5;
  }

  signature(s: string): void {
    // dbus-next writes a signature as ASCII with its character count as length.
    if (s.length > MAX_SIGNATURE || !/^[ybnqiuxtdsogvha(){}]*$/.test(s) || parseSignature(s) === null) throw notEncodable;
    this.ensure(s.length + 2);
    this.buf[this.at] = s.length;
    this.buf.write(s, this.at + 1, 'latin1');
    this.buf[this.at + 1 + s.length] = 0;
    this.at += s.length + 2;
  }
}

const isInteger = (v: unknown): v is number => typeof v === 'number' && Number.isInteger(v);

function int64(v: unknown, signed: boolean): bigint {
  let big: bigint;
  if (typeof v === 'bigint') big = v;
  else if (isInteger(v) && Number.isSafeInteger(v)) big = BigInt(v);
  else throw notEncodable;
  // dbus-next's lowest int64 is -(2^63 - 1); the true minimum goes to it (and its error).
  if (signed ? big <= -(1n << 63n) || big >= 1n << 63n : big < 0n || big >= 1n << 64n) throw notEncodable;
  return big;
}

function writeValue(w: Writer, type: TypeNode, value: unknown): void {
  if (value === undefined || value === null) throw notEncodable;
  switch (type.code) {
    case 'y':
      if (!isInteger(value) || value < 0 || value > 0xff) throw notEncodable;
      return w.u8(value);
    case 'b':
      if (value !== true && value !== false && value !== 0 && value !== 1) throw notEncodable;
      return w.u32(value ? 1 : 0);
    case 'n':
    case 'q': {
      const [min, max] = type.code === 'n' ? [-0x8000, 0x7fff] : [0, 0xffff];
      if (!isInteger(value) || value < min || value > max) throw notEncodable;
      return w.fixed(2, (buf, at) => (type.code === 'n' ? buf.writeInt16LE(value, at) : buf.writeUInt16LE(value, at)));
    }
    case 'i':
      if (!isInteger(value) || value < -0x80000000 || value > 0x7fffffff) throw notEncodable;
      return w.fixed(4, (buf, at) => buf.writeInt32LE(value, at));
    case 'u':
      if (!isInteger(value) || value < 0 || value > 0xffffffff) throw notEncodable;
      return w.u32(value);
    case 'x':
    case 't': {
      const big = int64(value, type.code === 'x');
      return w.fixed(8, (buf, at) => buf.writeBigUInt64LE(BigInt.asUintN(64, big), at));
    }
    case 'd':
      if (typeof value !== 'number' || !Number.isFinite(value)) throw notEncodable;
      return w.fixed(8, (buf, at) => buf.writeDoubleLE(value, at));
    case 's':
    case 'o':
      if (typeof value !== 'string') throw notEncodable;
      return w.string(value);
    case 'g':
      if (typeof value !== 'string') throw notEncodable;
      return w.signature(value);
    case 'v': {
      if (!(value instanceof Variant) || value.constructor !== Variant || typeof value.signature !== 'string') throw notEncodable;
      const inner = parseSignature(value.signature);
      if (!inner || inner.length !== 1) throw notEncodable;
      w.signature(value.signature);
      return writeValue(w, inner[0]!, value.value);
    }
    case '(':
    case '{': {
      if (!Array.isArray(value) || value.length !== type.children.length) throw notEncodable;
      w.align(8);
      for (let i = 0; i < value.length; i++) {
        const child = type.children[i]!;
        if (child.code !== 'v' && value[i] instanceof Variant) throw notEncodable;
        writeValue(w, child, value[i]);
      }
      return;
    }
    case 'a':
      return writeArray(w, type.children[0]!, value);
    default:
      throw notEncodable; // 'h': file descriptors go through dbus-next
  }
}

function writeArray(w: Writer, element: TypeNode, value: unknown): void {
  w.u32(0);
  const lengthAt = w.at - 4;
  w.align(element.align);
  const start = w.at;
  if (element.code === 'y' && Buffer.isBuffer(value)) {
    w.ensure(value.length);
    value.copy(w.buf, w.at);
    w.at += value.length;
  } else if (element.code === '{') {
    const [keyType, valueType] = element.children as [TypeNode, TypeNode];
    // dbus-next takes a dict as a plain object only, so its keys are strings.
    if (typeof value !== 'object' || value === null || value.constructor !== Object || (keyType.code !== 's' && keyType.code !== 'o')) throw notEncodable;
    for (const key of Object.keys(value)) {
      const item = (value as Record<string, unknown>)[key];
      if (valueType.code !== 'v' && item instanceof Variant) throw notEncodable;
      w.align(8);
      w.string(key);
      writeValue(w, valueType, item);
    }
  } else {
    if (!Array.isArray(value)) throw notEncodable;
    for (const item of value) {
      if (element.code !== 'v' && item instanceof Variant) throw notEncodable;
      writeValue(w, element, item);
    }
  }
  const length = w.at - start;
  if (length > 64 * 1024 * 1024) throw notEncodable;
  w.buf.writeUInt32LE(length, lengthAt);
}

/** The bytes of a body of `signature` holding `values`, or undefined when dbus-next must marshal it. */
export function encodeBody(signature: string, values: unknown[]): Buffer | undefined {
  const types = parseSignature(signature);
  if (!types || types.length !== values.length) return undefined;
  const w = new Writer(256);
  try {
    writeBody(w, types, values);
  } catch (err) {
    if (err instanceof NotEncodable) return undefined;
    throw err;
  }
  return w.buf.subarray(0, w.at);
}

// The body's offsets count from its own start, which is 8-aligned like every alignment.
function writeBody(w: Writer, types: TypeNode[], values: unknown[]): void {
  for (let i = 0; i < types.length; i++) {
    const type = types[i]!;
    if (type.code !== 'v' && values[i] instanceof Variant) throw notEncodable;
    writeValue(w, type, values[i]);
  }
}

/** The header fields of a message, as dbus-next's Message has them. */
export interface EncodableMessage {
  type?: number;
  flags?: number;
  serial: number;
  path?: string;
  interface?: string;
  member?: string;
  errorName?: string;
  replySerial?: number;
  destination?: string;
  sender?: string;
  signature?: string;
  body?: unknown[];
}

// Header field codes and types, in the order dbus-next writes them.
const FIELDS: ReadonlyArray<[keyof EncodableMessage, number, TypeNode]> = [
  ['path', 1, { code: 'o', children: [], align: 4 }],
  ['interface', 2, { code: 's', children: [], align: 4 }],
  ['member', 3, { code: 's', children: [], align: 4 }],
  ['errorName', 4, { code: 's', children: [], align: 4 }],
  ['replySerial', 5, { code: 'u', children: [], align: 4 }],
  ['destination', 6, { code: 's', children: [], align: 4 }],
  ['sender', 7, { code: 's', children: [], align: 4 }],
  ['signature', 8, { code: 'g', children: [], align: 1 }],
];
const METHOD_CALL = 1;

/** The whole message as bytes, or undefined when dbus-next must send it. */
export function encodeMessage(msg: EncodableMessage): Buffer | undefined {
  const types = parseSignature(msg.signature ?? '');
  const values = msg.body ?? [];
  if (!types || types.length !== values.length) return undefined;
  return encode(msg, (w) => writeBody(w, types, values));
}

/**
 * The header of a message whose body is already marshalled (it must match `signature`), padded
 * to where the body begins: the two are sent one after the other, so a reply of megabytes is
 * never copied into a buffer of its own for each call.
 */
export function encodeHeader(msg: EncodableMessage, bodyLength: number): Buffer | undefined {
  return encode(msg, bodyLength);
}

/** The header, then the body `body` writes; given the body's length instead, the header alone. */
function encode(msg: EncodableMessage, body: ((w: Writer) => void) | number): Buffer | undefined {
  if (!Number.isInteger(msg.serial) || msg.serial <= 0) return undefined;
  const w = new Writer(256);
  try {
    w.u8(0x6c); // 'l': little-endian
    w.u8(msg.type || METHOD_CALL);
    w.u8(msg.flags || 0);
    w.u8(1); // protocol version
    w.u32(0); // body length, patched below
    w.u32(msg.serial);
    w.u32(0); // header fields array length, patched below
    const fieldsStart = w.at; // 16: already 8-aligned
    for (const [name, code, type] of FIELDS) {
      const value = msg[name];
      if (!value) continue; // dbus-next leaves out every falsy field
      w.align(8);
      w.u8(code);
      w.signature(type.code); // each field's variant holds one basic type
      writeValue(w, type, value);
    }
    w.buf.writeUInt32LE(w.at - fieldsStart, 12);
    w.align(8);
    const bodyStart = w.at;
    if (typeof body === 'number') {
      w.buf.writeUInt32LE(body, 4);
      return w.buf.subarray(0, bodyStart);
    }
    body(w);
    w.buf.writeUInt32LE(w.at - bodyStart, 4);
  } catch (err) {
    if (err instanceof NotEncodable) return undefined;
    throw err;
  }
  return w.buf.subarray(0, w.at);
}
