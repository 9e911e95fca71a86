import { createRequire } from 'node:module';
import { PassThrough } from 'node:stream';
import { Message, MessageType, type MessageBus } from 'dbus-next';
import { describe, expect, it } from 'vitest';
import { filterInbound, type InboundCall } from '../../../src/dbus/inbound-filter.js';
import { MAX_INBOUND_BODY_BYTES, inboundJudge, methodSignatures } from '../../../src/dbus/inbound-policy.js';
import { ManagerInterface } from '../../../src/dbus/manager-interface.js';
import { waitFor } from '../../support/wait.js';
import { captureLogger } from '../../support/records.js';

// The filter runs in front of dbus-next's real parser on a stream we write wire bytes into.
const requireDbus = createRequire(import.meta.url);
const { marshallMessage } = requireDbus('dbus-next/lib/marshall-compat') as { marshallMessage(m: Message): [Buffer] };
const { unmarshalMessages } = requireDbus('dbus-next/lib/message') as {
  unmarshalMessages(stream: PassThrough, onMessage: (m: Record<string, unknown>) => void, opts: object): void;
};

const MANAGER = 'org.vmkeeper1.Manager';
const judge = inboundJudge(methodSignatures({ [MANAGER]: ManagerInterface.prototype.memberTable }));

let nextSerial = 1;
function call(member: string, signature: string, body: unknown[], flags = 0): Buffer {
  const m = new Message({ type: MessageType.METHOD_CALL, path: '/org/vmkeeper1', interface: MANAGER, member, sender: ':1.7', destination: 'org.vmkeeper1', signature, body, flags });
  m.serial = nextSerial++;
  return marshallMessage(m)[0];
}

function rig() {
  const stream = new PassThrough();
  const replies: Message[] = [];
  const judged: InboundCall[] = [];
  const bus = { _connection: { stream }, send: (m: Message) => void replies.push(m) } as unknown as MessageBus;
  const logger = captureLogger();
  filterInbound(bus, (c) => (judged.push(c), judge(c)), logger);
  const delivered: Array<Record<string, unknown>> = [];
  unmarshalMessages(stream, (m) => void delivered.push(m), {});
  return { stream, replies, judged, delivered, logger };
}

describe('filterInbound: refuses calls before their bodies are decoded', () => {
  it('passes a well-typed call through whole', async () => {
    const r = rig();
    r.stream.write(call('GetMachine', 's', ['web-1']));
    await waitFor(() => r.delivered.length === 1, { what: 'delivery' });
    expect(r.delivered[0]).toMatchObject({ type: MessageType.METHOD_CALL, member: 'GetMachine', body: ['web-1'] });
    expect(r.replies).toEqual([]);
  });

  it.each([
    ['a mis-typed body', () => call('GetMachine', 'ay', [Buffer.alloc(1000)]), 'org.freedesktop.DBus.Error.InvalidArgs', /GetMachine takes arguments of signature "s", not "ay"/],
    ['an oversized body', () => call('CreateMachine', 'ss', ['a', 'x'.repeat(MAX_INBOUND_BODY_BYTES)]), 'org.freedesktop.DBus.Error.LimitsExceeded', /exceeds the agent's limit/],
  ])('answers %s with a named error and hands dbus-next no body', async (_, make, errorName, text) => {
    const r = rig();
    const bytes = make();
    // In pieces, as a socket delivers a large message, then a good call right behind it.
    for (let i = 0; i < bytes.length; i += 4096) r.stream.write(bytes.subarray(i, i + 4096));
    r.stream.write(call('ListMachines', '', []));
    await waitFor(() => r.delivered.length === 2, { what: 'both messages parsed' });
    expect(r.replies).toHaveLength(1);
    expect(r.replies[0]).toMatchObject({ type: MessageType.ERROR, errorName, destination: ':1.7' });
    expect(String(r.replies[0]!.body[0])).toMatch(text);
    // dbus-next sees a body-less reply nobody waits for, and drops it; the stream stays in step.
    expect(r.delivered[0]).toMatchObject({ type: MessageType.METHOD_RETURN });
    expect(r.delivered[0]!.body).toBeUndefined();
    expect(r.delivered[1]).toMatchObject({ type: MessageType.METHOD_CALL, member: 'ListMachines' });
    expect(r.logger.lines).toMatchObject([{ level: 'warn', message: expect.stringMatching(/refused/) }]);
  });

  it('sends no error to a caller that asked for no reply', async () => {
    const r = rig();
    r.stream.write(call('GetMachine', 'u', [1], 0x1));
    await waitFor(() => r.delivered.length === 1, { what: 'delivery' });
    expect(r.replies).toEqual([]);
  });

  it('logs a flood from one sender once, not once per message', async () => {
    const r = rig();
    for (let i = 0; i < 50; i++) r.stream.write(call('GetMachine', 'u', [i]));
    await waitFor(() => r.delivered.length === 50, { what: 'delivery' });
    expect(r.replies).toHaveLength(50);
    expect(r.logger.lines).toHaveLength(1);
  });

  it('lets calls to members it does not know through (dbus-next answers UnknownMethod)', async () => {
    const r = rig();
    r.stream.write(call('NoSuchMethod', 's', ['x']));
    await waitFor(() => r.delivered.length === 1, { what: 'delivery' });
    expect(r.delivered[0]).toMatchObject({ member: 'NoSuchMethod', body: ['x'] });
  });
});
