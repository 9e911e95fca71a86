import { createRequire } from 'node:module';
import { Message, MessageType, Variant } from 'dbus-next';
import { describe, expect, it } from 'vitest';
import { MarshalledArray, marshalElement, marshalledBody } from '../../../src/dbus/marshalled.js';

const requireDbus = createRequire(import.meta.url);
const { marshallMessage } = requireDbus('dbus-next/lib/marshall-compat') as { marshallMessage(msg: Message): [Buffer, number[]] };
const { unmarshall } = requireDbus('dbus-next/lib/message') as { unmarshall(buf: Buffer): Message };
const { messageToJsFmt } = requireDbus('dbus-next/lib/marshall-compat') as { messageToJsFmt(msg: Message): Message };

/** dbus-next's own bytes for the body [value]. */
function reference(signature: string, value: unknown): Buffer {
  const [bytes] = marshallMessage(new Message({ type: MessageType.METHOD_RETURN, serial: 3, replySerial: 1 as unknown as string, signature, body: [value] }));
  return bytes.subarray(bytes.length - bytes.readUInt32LE(4));
}

const machine = (name: string, annotations: Record<string, string>) => ({
  'org.vmkeeper1.Machine': {
    Name: new Variant('s', name),
    GracePeriodSec: new Variant('u', 30),
    CreatedAt: new Variant('t', 1764000000000000n),
    Annotations: new Variant('a{ss}', annotations),
  },
});

describe('MarshalledArray', () => {
  it('is byte for byte what dbus-next sends for the same array of structs, elements of any length', () => {
    const entries = [
      ['a', 'stopped', 'off', '/org/vmkeeper1/machine/a'],
      ['web-10', 'running', 'on', '/org/vmkeeper1/machine/web_2d10'],
      ['x', 'pending', 'on', '/x'],
    ];
    const array = new MarshalledArray('a(ssso)', entries.map((e) => marshalElement('a(ssso)', [e], e)));
    expect(array.body.equals(reference('a(ssso)', entries))).toBe(true);
  });

  it('is byte for byte what dbus-next sends for a dict of objects with nested variants', () => {
    const objects: Record<string, unknown> = {
      '/org/vmkeeper1/machine/a': machine('a', {}),
      '/org/vmkeeper1/machine/bb': machine('bb', { team: 'blue', 'note/x': 'y'.repeat(7) }),
      '/org/vmkeeper1/machine/ccc': machine('ccc', { k: 'v' }),
    };
    const elements = Object.entries(objects).map(([path, value]) => marshalElement('a{oa{sa{sv}}}', { [path]: value }, path));
    expect(new MarshalledArray('a{oa{sa{sv}}}', elements).body.equals(reference('a{oa{sa{sv}}}', objects))).toBe(true);
  });

  it('makes each element its copy in the body, and a later body copies it from there', () => {
    const entries = [['a', 'stopped', 'off', '/a'], ['bb', 'running', 'on', '/bb']];
    const elements = entries.map((e) => marshalElement('a(ssso)', [e], e));
    const first = new MarshalledArray('a(ssso)', elements);
    for (const e of elements) expect(e.bytes().buffer).toBe(first.body.buffer);
    const second = new MarshalledArray('a(ssso)', elements);
    expect(second.body.equals(first.body)).toBe(true);
    expect(second.body.buffer).not.toBe(first.body.buffer);
    for (const e of elements) expect(e.bytes().buffer).toBe(second.body.buffer);
    expect(elements.map((e) => e.source)).toEqual(entries);
  });

  it('is the same as dbus-next for an empty array', () => {
    expect(new MarshalledArray('a(ssso)', []).body.equals(reference('a(ssso)', []))).toBe(true);
    expect(new MarshalledArray('a{oa{sa{sv}}}', []).body.equals(reference('a{oa{sa{sv}}}', {}))).toBe(true);
  });

  it('decodes back to the values it was made from', () => {
    const entries = [['a', 'stopped', 'off', '/a'], ['b', 'running', 'on', '/b']];
    const array = new MarshalledArray('a(ssso)', entries.map((e) => marshalElement('a(ssso)', [e], e)));
    const [bytes] = marshallMessage(new Message({ type: MessageType.METHOD_RETURN, serial: 3, replySerial: 1 as unknown as string, signature: 'a(ssso)', body: [entries] }));
    const header = bytes.subarray(0, bytes.length - bytes.readUInt32LE(4));
    const decoded = messageToJsFmt(unmarshall(Buffer.concat([header, array.body])));
    expect(decoded.body).toEqual([entries]);
  });

  it('refuses signatures that are not arrays of structs or dict entries', () => {
    expect(() => new MarshalledArray('as', [])).toThrow(/not an array/);
    expect(() => marshalElement('s', 'x', 'x')).toThrow(/not an array/);
  });

  it('is recognised only as the single value of a reply of its own signature', () => {
    const array = new MarshalledArray('a(ssso)', []);
    const reply = (signature: string, body: unknown[]) => new Message({ type: MessageType.METHOD_RETURN, replySerial: 1 as unknown as string, signature, body });
    expect(marshalledBody(reply('a(ssso)', [array]))).toBe(array);
    expect(marshalledBody(reply('a{oa{sa{sv}}}', [array]))).toBeUndefined();
    expect(marshalledBody(reply('a(ssso)', [[]]))).toBeUndefined();
  });
});
