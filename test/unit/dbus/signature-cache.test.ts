import { createRequire } from 'node:module';
import { Message, MessageType, Variant } from 'dbus-next';
import { afterEach, describe, expect, it } from 'vitest';
import { cacheDbusSignatures, cachedParser } from '../../../src/dbus/signature-cache.js';

// With the cache installed, dbus-next must read these messages (every type inside variants the
// agent sends, headers included) exactly as its own reader does:
// the same values, the same errors, and its own reader back once restored.

const requireDbus = createRequire(import.meta.url);
const { marshallMessage, messageToJsFmt } = requireDbus('dbus-next/lib/marshall-compat') as {
  marshallMessage(msg: Message): [Buffer, number[]];
  messageToJsFmt(msg: object): { body: unknown[]; signature: string };
};
const { unmarshall } = requireDbus('dbus-next/lib/message') as { unmarshall(bytes: Buffer): object };
const signatureModule = requireDbus('dbus-next/lib/signature') as { parseSignature(signature: string): unknown };
const bufferProto = (requireDbus('dbus-next/lib/dbus-buffer') as { prototype: { read: unknown; readVariant: unknown } }).prototype;

const BODIES: Array<[string, unknown[]]> = [
  ['a{oa{sa{sv}}}', [{
    '/org/vmkeeper1/machine/web_2d1': {
      'org.vmkeeper1.Machine': {
        Name: new Variant('s', 'web-1'), CreatedAt: new Variant('t', 1796636033794000n), GracePeriodSec: new Variant('u', 60),
        Annotations: new Variant('a{ss}', { owner: 'ops', 'päivää': '日本語' }), Running: new Variant('b', true),
      },
    },
    '/org/vmkeeper1/machine/db': { 'org.vmkeeper1.Machine': { Name: new Variant('s', 'db'), Nested: new Variant('v', new Variant('as', ['a', 'b'])) } },
  }]],
  ['sa{sv}as', ['org.vmkeeper1.Machine', { State: new Variant('s', 'running'), Disks: new Variant('a(ss)', [['root', '/x'], ['data', '/y']]) }, ['Spec']]],
  ['av', [[new Variant('x', -5n), new Variant('d', 1.5), new Variant('ay', Buffer.from([1, 2, 3])), new Variant('(si)', ['a', -1])]]],
  ['s', ['no variants at all']],
];

function wire(signature: string, body: unknown[]): Buffer {
  return marshallMessage(new Message({ type: MessageType.METHOD_RETURN, serial: 7, replySerial: 3 as unknown as string, destination: ':1.9', signature, body }))[0];
}

const decode = (bytes: Buffer) => messageToJsFmt(unmarshall(bytes)).body;

describe('cacheDbusSignatures', () => {
  let restore: (() => void) | undefined;
  afterEach(() => restore?.());

  it('reads every body, header variants included, exactly as dbus-next reads it', () => {
    const stock = BODIES.map(([sig, body]) => decode(wire(sig, body)));
    const stockRead = bufferProto.read;
    restore = cacheDbusSignatures();
    expect(bufferProto.read).not.toBe(stockRead);
    // Twice: the second read of each signature comes from the cache.
    for (let round = 0; round < 2; round++) {
      expect(BODIES.map(([sig, body]) => decode(wire(sig, body)))).toEqual(stock);
    }
  });

  it('parses each signature once, however many variants and messages carry it', () => {
    const parses = new Map<string, number>();
    const stockParse = signatureModule.parseSignature;
    signatureModule.parseSignature = (signature) => {
      parses.set(signature, (parses.get(signature) ?? 0) + 1);
      return stockParse(signature);
    };
    try {
      restore = cacheDbusSignatures();
    } finally {
      signatureModule.parseSignature = stockParse;
    }
    const bytes = wire('a{sv}', [Object.fromEntries(Array.from({ length: 50 }, (_, i) => [`P${i}`, new Variant('s', `v${i}`)]))]);
    for (let i = 0; i < 3; i++) decode(bytes);
    // 50 string variants a message, and the header's own variants and signatures.
    expect(parses.get('s')).toBe(1);
    expect(parses.get('a{sv}')).toBe(1);
    expect([...parses.values()].every((n) => n === 1)).toBe(true);
  });

  it('puts dbus-next\'s own reader back, and installs once however often it is called', () => {
    const { read, readVariant } = bufferProto;
    restore = cacheDbusSignatures();
    expect(cacheDbusSignatures()).toBe(restore);
    expect(bufferProto.read).not.toBe(read);
    expect(bufferProto.readVariant).not.toBe(readVariant);
    restore();
    expect(bufferProto.read).toBe(read);
    expect(bufferProto.readVariant).toBe(readVariant);
    // A put-back function from before must not undo a later install.
    const stale = restore;
    restore = cacheDbusSignatures();
    stale();
    expect(bufferProto.read).not.toBe(read);
  });

  it('refuses a message with a bad variant signature as dbus-next does', () => {
    // A variant holding type 's' whose signature byte is rewritten to an unknown type 'k'.
    const bytes = wire('v', [new Variant('s', 'x')]);
    const at = bytes.lastIndexOf(Buffer.from([1, 0x73, 0]));
    bytes[at + 1] = 0x6b;
    const stockError = (() => { try { decode(bytes); } catch (err) { return (err as Error).message; } return 'no error'; })();
    expect(stockError).toMatch(/Unknown type: "k"/);
    restore = cacheDbusSignatures();
    for (let round = 0; round < 2; round++) expect(() => decode(bytes)).toThrow(stockError);
  });
});

describe('cachedParser', () => {
  it('parses a signature once, keeps at most `max` of them and none longer than `maxLength`, and keeps no error', () => {
    const parses: string[] = [];
    const parse = cachedParser((s: string) => {
      parses.push(s);
      if (s === 'bad') throw new Error('Bad signature');
      return { tree: s };
    }, 2, 5);
    parse('a{oas}'); // longer than 5: parsed each time, never kept
    parse('a{oas}');
    expect(parse('s')).toBe(parse('s'));
    parse('a{sv}');
    parse('u'); // over the bound: parsed each time, never kept
    parse('u');
    expect(() => parse('bad')).toThrow('Bad signature');
    expect(() => parse('bad')).toThrow('Bad signature');
    parse('s');
    expect(parses).toEqual(['a{oas}', 'a{oas}', 's', 'a{sv}', 'u', 'u', 'bad', 'bad']);
  });
});
