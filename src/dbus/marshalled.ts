import { createRequire } from 'node:module';
import { Message, MessageType, type MessageBus } from 'dbus-next';
import { type EncodableMessage, encodeBody, encodeHeader, encodeMessage } from './message-encoder.js';
import { MarshalledElement, SharedBody } from './marshalled-element.js';

export { MarshalledElement } from './marshalled-element.js';

// dbus-next converts and marshals a reply's whole body on every send: ~0.2 s for ListMachines and
// ~2 s for GetManagedObjects with 10,000 machines. A reply made of many elements that rarely
// change is sent here from each element's bytes, marshalled once, instead.
//
// Every element of an array of structs or dict entries starts at an 8-aligned offset, and nothing
// inside one needs more than 8-byte alignment, so an element's bytes do not depend on where in the
// array it sits: the body is the array's length, padding to 8, then the elements, each padded to
// 8 except the last.

const requireDbus = createRequire(import.meta.url);
const { marshallMessage } = requireDbus('dbus-next/lib/marshall-compat') as { marshallMessage(msg: Message): [Buffer, number[]] };

const pad8 = (n: number) => (n + 7) & ~7;

/** The bytes of the body `[value]` of signature `signature` (one complete type). */
function marshalBody(signature: string, value: unknown): Buffer {
  const encoded = encodeBody(signature, [value]);
  if (encoded) return encoded;
  const msg = new Message({ type: MessageType.METHOD_RETURN, serial: 1, replySerial: 1 as unknown as string, signature, body: [value] });
  const [bytes] = marshallMessage(msg);
  const bodyBytes = bytes.readUInt32LE(4);
  return bytes.subarray(bytes.length - bodyBytes);
}

/**
 * One element of an array of signature `arraySignature` (`a(...)` or `a{...}`) marshalled from
 * `single`, that array holding just the element (a one-item list, or a one-key object).
 */
export function marshalElement<S>(arraySignature: string, single: unknown, source: S): MarshalledElement<S> {
  if (!/^a[({]/.test(arraySignature)) throw new Error(`not an array of structs or dict entries: ${arraySignature}`);
  // Until it is joined into a reply the element may sit in a slab of Node's shared buffer pool;
  // the reply it is marshalled for is joined at once, and the slab is let go then.
  const body = marshalBody(arraySignature, single);
  return new MarshalledElement(source, body, 8, body.length - 8);
}

/**
 * A reply body of one array, joined from the elements' marshalled bytes; each element is its copy
 * in this body from then on (marshalled-element.ts). The body is never written after that: sends
 * may still hold it.
 */
export class MarshalledArray {
  readonly body: Buffer;

  constructor(readonly signature: string, elements: readonly MarshalledElement[]) {
    if (!/^a[({]/.test(signature)) throw new Error(`not an array of structs or dict entries: ${signature}`);
    let size = 0;
    for (const e of elements) size = pad8(size) + e.length;
    const body = Buffer.alloc(8 + size);
    body.writeUInt32LE(size, 0);
    const shared = new SharedBody(body, elements);
    let at = 8;
    for (const e of elements) {
      at = 8 + pad8(at - 8);
      e.joinInto(shared, at);
      at += e.length;
    }
    this.body = body;
  }
}

/** The MarshalledArray a method reply carries as its only value, if it does. */
export function marshalledBody(msg: Message): MarshalledArray | undefined {
  const body = msg.body as unknown[] | undefined;
  if (body?.length !== 1 || !(body[0] instanceof MarshalledArray)) return undefined;
  return body[0].signature === msg.signature ? body[0] : undefined;
}

interface Connection {
  stream?: { writable?: boolean; supportsUnixFd?: boolean; write(data: unknown): boolean };
  state?: string;
}

/**
 * Sends `msg` encoded by message-encoder.ts (with `array` as its body, if given), as dbus-next's
 * connection would send it. False when the encoder leaves the message to dbus-next.
 */
export function sendEncoded(bus: MessageBus, msg: Message, array?: MarshalledArray): boolean {
  const connection = (bus as unknown as { _connection?: Connection })._connection;
  const stream = connection?.stream;
  if (!stream || connection?.state !== 'connected' || !stream.writable) throw new Error('Cannot send message, stream is closed');
  const sent = msg as Message & { _sent?: boolean };
  if (msg.serial === null || msg.serial === undefined || sent._sent) {
    msg.serial = (bus as unknown as { newSerial(): number }).newSerial();
  }
  const encodable = msg as unknown as EncodableMessage;
  const first = array ? encodeHeader(encodable, array.body.length) : encodeMessage(encodable);
  if (!first) return false;
  const write = (data: Buffer) => (stream.supportsUnixFd ? stream.write({ data, fds: [] }) : stream.write(data));
  // Written back to back, nothing can come between them: the stream sends them in this order.
  write(first);
  if (array) write(array.body);
  return true;
}
