import { createRequire } from 'node:module';
import { Message, MessageType, Variant, type MessageBus } from 'dbus-next';
import { describe, expect, it } from 'vitest';
import { DBUS_ERROR_INTERNAL } from '../../../src/dbus/errors.js';
import { guardOutbound, unmarshallableText } from '../../../src/dbus/outbound-guard.js';
import { captureLogger } from '../../support/records.js';

// dbus-next's own marshaller stands in for the socket, so a value it refuses throws as on the bus;
// what the guard encodes itself is written to the stream and read back with dbus-next's parser.
const requireDbus = createRequire(import.meta.url);
const { marshallMessage, messageToJsFmt } = requireDbus('dbus-next/lib/marshall-compat') as { marshallMessage(m: Message): unknown; messageToJsFmt(m: Message): Message };
const { unmarshall } = requireDbus('dbus-next/lib/message') as { unmarshall(buf: Buffer): Message };

function guardedBus() {
  const sent: Message[] = [];
  let serials = 0;
  const bus = {
    send(m: Message) {
      if (m.serial === null) (m as unknown as { serial: number }).serial = ++serials; // as MessageBus.send does
      marshallMessage(m);
      sent.push(m);
    },
    newSerial: () => ++serials,
    _connection: {
      state: 'connected',
      stream: { writable: true, destroyed: false, write: (data: Buffer) => sent.push(messageToJsFmt(unmarshall(data))) },
    },
  };
  const logger = captureLogger();
  guardOutbound(bus as unknown as MessageBus, logger);
  return { bus: bus as unknown as MessageBus, sent, logger };
}

// dbus-next's typings declare serials as strings; on the wire and at run time they are numbers.
const serial = (n: number) => n as unknown as string;
const reply = (signature: string, body: unknown[]) =>
  new Message({ type: MessageType.METHOD_RETURN, replySerial: serial(7), destination: ':1.42', signature, body });

describe('unmarshallableText', () => {
  it.each([
    ['a NUL in a dict value', [{ a: 'x\u0000' }]],
    ['a noncharacter inside a variant', [{ p: new Variant('a{ss}', { a: '\uffff' }) }]],
    ['a lone surrogate in a key', [{ ['\ud800']: 'v' }]],
    ['a U+FFFE deep in an array of structs', [[['ok', ['\ufffe']]]]],
  ])('finds %s', (_, body) => {
    expect(unmarshallableText(body)).toBeDefined();
  });
  it('passes what every client reads', () => {
    expect(unmarshallableText([{ a: 'tab\tnew\nline \u{1f600}' }, 5n, true, Buffer.from([0]), new Variant('s', 'ok')])).toBeUndefined();
  });
});

describe('guardOutbound: no reply is ever dropped silently', () => {
  it.each([
    ['a NUL (dbus-next throws)', [{ note: 'a\u0000b' }]],
    ['a noncharacter (sd-bus and GLib would refuse it)', [{ note: '\ufffe' }]],
    ['a "constructor" key (dbus-next refuses the dict)', [{ constructor: 'x' }]],
  ])('turns a reply with %s into InternalError to the caller, with an error log', (_, body) => {
    const { bus, sent, logger } = guardedBus();
    bus.send(reply('a{ss}', body));
    expect(sent).toHaveLength(1);
    expect(sent[0]).toMatchObject({ type: MessageType.ERROR, errorName: DBUS_ERROR_INTERNAL, replySerial: 7, destination: ':1.42' });
    expect(String(sent[0]!.body[0])).toMatch(/could not encode its reply/);
    expect(logger.lines.filter((l) => l.level === 'error')).toHaveLength(1);
  });

  it('keeps an error reply named when its text cannot be encoded', () => {
    const { bus, sent } = guardedBus();
    bus.send(new Message({ type: MessageType.ERROR, replySerial: serial(3), destination: ':1.9', errorName: 'org.vmkeeper1.Error.NoSuchMachine', signature: 's', body: ['no \u0000'] }));
    expect(sent[0]).toMatchObject({ errorName: 'org.vmkeeper1.Error.NoSuchMachine', replySerial: 3 });
    expect(unmarshallableText(sent[0]!.body)).toBeUndefined();
  });

  it('cuts an error text to its first line (dbus-next appends stack traces)', () => {
    const { bus, sent } = guardedBus();
    const stack = 'Service error: The service threw an error.\nError: boom\n    at handler (/srv/x.js:1:2)';
    bus.send(new Message({ type: MessageType.ERROR, replySerial: serial(4), destination: ':1.9', errorName: 'com.github.dbus_next.ServiceError', signature: 's', body: [stack] }));
    expect(sent[0]!.body).toEqual(['Service error: The service threw an error.']);
  });

  it('drops a signal it cannot encode with an error log (no caller to tell)', () => {
    const { bus, sent, logger } = guardedBus();
    bus.send(Message.newSignal('/org/vmkeeper1', 'org.vmkeeper1.Manager', 'MachineEvent', 's', ['\uffff']));
    expect(sent).toHaveLength(0);
    expect(logger.lines).toMatchObject([{ level: 'error' }]);
  });

  it('sends good replies unchanged', () => {
    const { bus, sent, logger } = guardedBus();
    const good = reply('a{ss}', [{ owner: 'team-a' }]);
    bus.send(good);
    expect(sent).toHaveLength(1);
    expect(sent[0]).toMatchObject({ type: MessageType.METHOD_RETURN, replySerial: 7, destination: ':1.42', signature: 'a{ss}', body: [{ owner: 'team-a' }] });
    expect(logger.lines).toEqual([]);
  });

  it('only logs at debug once the connection is closed', () => {
    const { bus, logger } = guardedBus();
    (bus as unknown as { _connection: { stream: { writable: boolean } } })._connection.stream.writable = false;
    bus.send(reply('a{ss}', [{ constructor: 'x' }]));
    expect(logger.lines.map((l) => l.level)).toEqual(['debug']);
  });
});
