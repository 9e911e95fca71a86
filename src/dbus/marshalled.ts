import { createRequire } from 'node:module';
import { Message, MessageType, type MessageBus } from 'dbus-next';
import { type EncodableMessage, encodeBody, encodeHeader, encodeMessage } from './message-encoder.js';

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
 * The bytes of one element of an array of signature `arraySignature` (`a(...)` or `a{...}`):
 * `single` is that array holding just the element (a one-item list, or a one-key object).
 */
export function marshalElement(arraySignature: string, single: unknown): Buffer {
  if (!/^a[({]/.test(arraySignature)) throw new Error(`not an array of structs or dict entries: ${arraySignature}`);
  const element = marshalBody(arraySignature, single).subarray(8);
  // Elements are kept for as long as their machine does not change. A copy from Node's shared 8 KiB
  // pool would keep the whole slab alive, slabs that short-lived buffers filled in between: with
  // 10,000 machines that held 29 MiB for 9 MiB of elements. An unpooled copy holds its own bytes.
  const owned = Buffer.allocUnsafeSlow(element.length);
  element.copy(owned);
  return owned;
}

/** A reply body of one array, given as the elements' marshalled bytes. */
export class MarshalledArray {
  readonly body: Buffer;

  constructor(readonly signature: string, elements: readonly Buffer[]) {
    if (!/^a[({]/.test(signature)) throw new Error(`not an array of structs or dict entries: ${signature}`);
    let size = 0;
    for (const e of elements) size = pad8(size) + e.length;
    const body = Buffer.alloc(8 + size);
    body.writeUInt32LE(size, 0);
    let at = 8;
    for (const e of elements) {
      at = 8 + pad8(at - 8);
      e.copy(body, at);
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
