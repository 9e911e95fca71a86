import { Message, MessageType, Variant, type MessageBus } from 'dbus-next';
import type { Logger } from '../logging/logger.js';
import { describeError } from '../machine/errors.js';
import { wireTextProblem } from '../machine/text-rules.js';
import { DBUS_ERROR_INTERNAL } from './errors.js';
import { marshalledBody, sendEncoded } from './marshalled.js';

// Every message the agent sends passes here. dbus-next throws on some values (a NUL, a dict whose
// `constructor` key shadows Object) and sends others that sd-bus and GLib clients then refuse
// (noncharacters, lone surrogates). A reply that cannot go out becomes a named error to its caller.

/**
 * Frozen values whose every string was checked when they were built (a machine's cached D-Bus
 * values): the guard skips them instead of walking 10,000 machines on every reply.
 */
const checked = new WeakSet<object>();

/** Freezes `value` and, if no string in it is a problem, marks it checked. Returns the problem, if any. */
export function checkOnce<T extends object>(value: T): string | undefined {
  Object.freeze(value);
  const problem = unmarshallableText(value);
  if (!problem) checked.add(value);
  return problem;
}

/** Why some string inside `value` cannot be carried by every D-Bus client, or undefined. */
export function unmarshallableText(value: unknown): string | undefined {
  if (typeof value === 'string') return wireTextProblem(value);
  if (value instanceof Variant) return unmarshallableText(value.value);
  if (Buffer.isBuffer(value) || typeof value !== 'object' || value === null) return undefined;
  if (checked.has(value)) return undefined;
  if (Array.isArray(value)) {
    for (const item of value) {
      const problem = unmarshallableText(item);
      if (problem) return problem;
    }
    return undefined;
  }
  for (const key of Object.keys(value)) {
    const problem = wireTextProblem(key) ?? unmarshallableText((value as Record<string, unknown>)[key]);
    if (problem) return problem;
  }
  return undefined;
}

const GUARDED = Symbol.for('vmkeeper.dbus.outboundGuard');

/**
 * Wraps bus.send: a message with a string no client can read is not sent; a method reply that
 * cannot be sent (for that reason or because the marshaller throws) becomes
 * org.vmkeeper1.Error.InternalError to the caller (an error reply keeps its name and loses its text);
 * all are logged as errors. Once the connection
 * is closed nothing can be sent at all, and that is only a debug line.
 */
export function guardOutbound(bus: MessageBus, logger: Logger): void {
  const marked = bus as MessageBus & { [GUARDED]?: true };
  if (marked[GUARDED]) return;
  marked[GUARDED] = true;
  const send = bus.send.bind(bus);
  const refuse = (msg: Message, why: string) => {
    const what = msg.type === MessageType.SIGNAL ? `signal ${msg.interface}.${msg.member}` : `reply to ${msg.destination} (serial ${msg.replySerial})`;
    logger.error('D-Bus message not sent: it cannot be marshalled', { message: what, path: msg.path, error: why });
    // The caller still gets an answer: an error in place of the reply, or the error without its text.
    let name: string;
    let text: string;
    if (msg.type === MessageType.METHOD_RETURN) [name, text] = [DBUS_ERROR_INTERNAL, `the agent could not encode its reply: ${why}`];
    else if (msg.type === MessageType.ERROR && msg.errorName) [name, text] = [msg.errorName, `(the error text could not be encoded: ${why})`];
    else return;
    try {
      send(new Message({ type: MessageType.ERROR, replySerial: msg.replySerial, destination: msg.destination, errorName: name, signature: 's', body: [text] }));
    } catch (err) {
      logger.debug('D-Bus message dropped', { error: describeError(err) });
    }
  };
  const coalesce = writeCoalescer(bus);
  bus.send = (msg: Message) => {
    coalesce();
    oneLineErrorText(msg);
    // Built only from checked values (see dbus-service.ts), so there is nothing left to check.
    const marshalled = marshalledBody(msg);
    const problem = marshalled ? undefined : unmarshallableText(msg.body);
    if (problem) return refuse(msg, `a string ${problem}`);
    try {
      // Encoded here when it can be (message-encoder.ts), else by dbus-next.
      if (!sendEncoded(bus, msg, marshalled)) {
        if (marshalled) throw new Error(`cannot encode the header of ${msg.member ?? 'a reply'}`);
        send(msg);
      }
    } catch (err) {
      if (isClosed(bus)) logger.debug('D-Bus message dropped after disconnect', { member: msg.member, error: describeError(err) });
      else refuse(msg, describeError(err));
    }
  };
}

/** dbus-next answers a handler that throws with its stack trace; callers get its first line only. */
function oneLineErrorText(msg: Message): void {
  const text: unknown = msg.type === MessageType.ERROR ? msg.body?.[0] : undefined;
  if (typeof text === 'string' && text.includes('\n')) msg.body = [text.split('\n')[0]!.trim()];
}

interface CorkableStream {
  writable?: boolean;
  cork?(): void;
  uncork?(): void;
}

/**
 * Holds the connection's writes until the end of this event-loop turn, then sends them in one
 * writev: a batch of acknowledged writes sends a reply and three signals per machine, and one
 * socket write each (a wake-up of dbus-daemon each) was the largest single cost of a write.
 */
function writeCoalescer(bus: MessageBus): () => void {
  let corked: CorkableStream | undefined;
  return () => {
    if (corked) return;
    const stream = (bus as unknown as { _connection?: { stream?: CorkableStream } })._connection?.stream;
    if (!stream?.cork || !stream.uncork || stream.writable === false) return;
    stream.cork();
    corked = stream;
    // setImmediate, not nextTick: the replies of one batch go out from promise continuations
    // that run after the first nextTick would have uncorked.
    setImmediate(() => {
      corked = undefined;
      stream.uncork!();
    });
  };
}

function isClosed(bus: MessageBus): boolean {
  const stream = (bus as unknown as { _connection?: { stream?: { destroyed?: boolean; writable?: boolean } } })._connection?.stream;
  return stream === undefined || stream.destroyed === true || stream.writable === false;
}
