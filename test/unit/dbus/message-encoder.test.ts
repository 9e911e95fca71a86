import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { Message, MessageType, Variant } from 'dbus-next';
import { describe, expect, it } from 'vitest';
import { encodeHeader, encodeMessage, type EncodableMessage } from '../../../src/dbus/message-encoder.js';
import { prng } from '../../support/prng.js';

// The encoder must write exactly the bytes dbus-next writes, for every signature the agent's
// interfaces send, and leave to dbus-next every value it cannot encode the same way.

const requireDbus = createRequire(import.meta.url);
const { marshallMessage } = requireDbus('dbus-next/lib/marshall-compat') as { marshallMessage(msg: Message): [Buffer, number[]] };

const INTROSPECTION = path.resolve(__dirname, '../../../src/dbus/introspection');

/** Every body the agent's interfaces carry: method replies, signals, and properties as variants. */
function interfaceSignatures(): string[] {
  const signatures = new Set<string>(['sa{sv}as', 'oa{sa{sv}}', 'oas', 's']); // PropertiesChanged, InterfacesAdded/Removed, an error text
  for (const file of ['org.vmkeeper1.Manager.xml', 'org.vmkeeper1.Machine.xml']) {
    const xml = readFileSync(path.join(INTROSPECTION, file), 'utf8');
    for (const block of xml.match(/<(method|signal)[\s\S]*?<\/\1>/g) ?? []) {
      const args = [...block.matchAll(/<arg ([^>]*)\/>/g)].map((m) => m[1]!);
      const out = args.filter((a) => block.startsWith('<signal') || /direction="out"/.test(a));
      signatures.add(out.map((a) => /type="([^"]+)"/.exec(a)![1]).join(''));
    }
    for (const m of xml.matchAll(/<property [^>]*type="([^"]+)"/g)) signatures.add(`a{sv}`).add(m[1]!);
  }
  return [...signatures];
}


const TEXTS = ['', 'a', 'web-1', '/org/vmkeeper1/machine/web_2d1', 'päivää', '日本語のテキスト', '🙂 emoji', 'x'.repeat(300)];
const SIGNATURES_IN_VARIANTS = ['s', 'u', 't', 'b', 'as', 'a{ss}', 'x', 'd', 'i', 'y', 'ay', 'a(ss)', 'v'];

function completeTypes(signature: string): string[] {
  const out: string[] = [];
  let at = 0;
  const one = (): void => {
    const c = signature[at++]!;
    if (c === 'a') return one();
    if (c === '(' || c === '{') {
      const close = c === '(' ? ')' : '}';
      while (signature[at] !== close) one();
      at++;
    }
  };
  while (at < signature.length) {
    const start = at;
    one();
    out.push(signature.slice(start, at));
  }
  return out;
}

function valueOf(type: string, random: () => number, depth = 0): unknown {
  const pick = <T>(xs: readonly T[]) => xs[Math.floor(random() * xs.length)]!;
  switch (type[0]) {
    case 'y': return Math.floor(random() * 256);
    case 'b': return random() < 0.5;
    case 'n': return Math.floor(random() * 65536) - 32768;
    case 'q': return Math.floor(random() * 65536);
    case 'i': return Math.floor(random() * 2 ** 32) - 2 ** 31;
    case 'u': return pick([0, 1, 30, 2 ** 32 - 1, Math.floor(random() * 2 ** 32)]);
    case 'x': return pick([0n, -1n, -(2n ** 63n) + 1n, 2n ** 63n - 1n, 1764000000000000n, -5]);
    case 't': return pick([0n, 1n, 2n ** 64n - 1n, 1764000000000000n, 42, BigInt(Math.floor(random() * 2 ** 53))]);
    case 'd': return pick([0, -1.5, Math.PI, 1e300, random()]);
    case 's': return pick(TEXTS);
    case 'o': return pick(['/', '/org/vmkeeper1', '/org/vmkeeper1/machine/a_2db']);
    case 'g': return pick(['', 's', 'a{sv}', '(tssss)']);
    case 'v': {
      const inner = depth > 2 ? 's' : pick(SIGNATURES_IN_VARIANTS);
      return new Variant(inner, valueOf(inner, random, depth + 1));
    }
    case '(': return completeTypes(type.slice(1, -1)).map((t) => valueOf(t, random, depth + 1));
    case 'a': {
      const element = type.slice(1);
      const n = pick([0, 1, 2, 5]);
      if (element === 'y' && random() < 0.5) return Buffer.from(Array.from({ length: n }, () => Math.floor(random() * 256)));
      if (element[0] === '{') {
        const [, valueType] = completeTypes(element.slice(1, -1)) as [string, string];
        return Object.fromEntries(Array.from({ length: n }, (_, i) => [`${pick(TEXTS)}${i}`, valueOf(valueType, random, depth + 1)]));
      }
      return Array.from({ length: n }, () => valueOf(element, random, depth + 1));
    }
    default: throw new Error(`no generator for ${type}`);
  }
}

function headers(random: () => number, signature: string, body: unknown[]): EncodableMessage {
  const kind = Math.floor(random() * 3);
  const base = { serial: 1 + Math.floor(random() * 100000), signature, body, sender: random() < 0.3 ? ':1.42' : undefined, flags: random() < 0.5 ? 0 : 1 };
  if (kind === 0) return { ...base, type: MessageType.METHOD_RETURN, replySerial: 7, destination: ':1.7' };
  if (kind === 1) return { ...base, type: MessageType.SIGNAL, path: '/org/vmkeeper1/machine/web_2d1', interface: 'org.vmkeeper1.Manager', member: 'EventRecorded' };
  return { ...base, type: MessageType.ERROR, replySerial: 9, destination: ':1.9', errorName: 'org.vmkeeper1.Error.NoSuchMachine' };
}

/** dbus-next's bytes for the same message (it rewrites the body it is given, so a copy). */
function reference(msg: EncodableMessage): Buffer {
  const [bytes] = marshallMessage(new Message({ ...msg, body: structuredCloneKeepingVariants(msg.body ?? []) } as ConstructorParameters<typeof Message>[0]));
  return bytes;
}

function structuredCloneKeepingVariants(value: unknown): any {
  if (value instanceof Variant) return new Variant(value.signature, structuredCloneKeepingVariants(value.value));
  if (Buffer.isBuffer(value)) return Buffer.from(value);
  if (Array.isArray(value)) return value.map(structuredCloneKeepingVariants);
  if (value && typeof value === 'object') return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, structuredCloneKeepingVariants(v)]));
  return value;
}

describe('encodeMessage', () => {
  const signatures = [...interfaceSignatures(), 'ybnqiuxtdsog', 'ay', 'av', 'a(yv)', 'a{sa{sv}}', 'aas', '(ybt)a(nq)', 'va{sv}'];

  it('knows the agent\'s own signatures (the test reads them from the introspection files)', () => {
    expect(signatures).toEqual(expect.arrayContaining(['a(ssso)', 'a{oa{sa{sv}}}', 'a(tssss)', 'a(ssstt)', 'sa{sv}as']));
    expect(signatures.length).toBeGreaterThan(15);
  });

  it.each(signatures.map((s) => [s]))('writes what dbus-next writes for %s (200 random messages)', (signature) => {
    // A seeded generator, so a failure repeats.
    const random = prng(signature.length * 7919 + signature.charCodeAt(0));
    for (let i = 0; i < 200; i++) {
      const body = completeTypes(signature).map((t) => valueOf(t, random));
      const msg = headers(random, signature, body);
      const expected = reference(msg);
      const got = encodeMessage(msg);
      expect(got, `${signature} #${i}: ${JSON.stringify(msg, (_k, v) => (typeof v === 'bigint' ? `${v}n` : v))}`).toBeDefined();
      expect(got!.toString('hex')).toBe(expected.toString('hex'));
    }
  });

  it('writes a message without a body, and the header a pre-marshalled body follows', () => {
    const msg: EncodableMessage = { type: MessageType.METHOD_RETURN, serial: 5, replySerial: 4, destination: ':1.3' };
    expect(encodeMessage(msg)!.toString('hex')).toBe(reference(msg).toString('hex'));
    const full: EncodableMessage = { ...msg, signature: 'as', body: [['a', 'bc']] };
    const fullBytes = reference(full);
    const bodyBytes = fullBytes.subarray(fullBytes.length - fullBytes.readUInt32LE(4));
    const header = encodeHeader({ ...msg, signature: 'as' }, bodyBytes.length)!;
    expect(Buffer.concat([header, bodyBytes]).toString('hex')).toBe(fullBytes.toString('hex'));
  });

  it.each([
    ['a NUL in a string', 's', ['a\0b']],
    ['a Buffer where a string is expected', 's', [Buffer.from('x')]],
    ['a Variant where a plain value is expected', 's', [new Variant('s', 'x')]],
    ['a Variant as a plain dict value', 'a{ss}', [{ k: new Variant('s', 'x') }]],
    ['a dict that is not a plain object', 'a{ss}', [new Map([['k', 'v']])]],
    ['a dict with a null prototype', 'a{ss}', [Object.assign(Object.create(null), { k: 'v' })]],
    ['a dict keyed by numbers', 'a{us}', [{ 1: 'v' }]],
    ['a file descriptor', 'h', [3]],
    ['a uint32 out of range', 'u', [2 ** 32]],
    ['a fraction for an integer', 'u', [1.5]],
    ['an unsafe integer for a uint64', 't', [2 ** 60]],
    ['a negative uint64', 't', [-1n]],
    ['the lowest int64, which dbus-next refuses', 'x', [-(2n ** 63n)]],
    ['a non-finite double', 'd', [Number.NaN]],
    ['a plain value for a variant', 'v', ['x']],
    ['a bad signature in a variant', 'v', [new Variant('a', [])]],
    ['too few struct members', '(ss)', [['a']]],
    ['a missing body value', 'ss', ['a']],
    ['undefined', 's', [undefined]],
  ] as [string, string, unknown[]][])('leaves %s to dbus-next', (_what, signature, body) => {
    expect(encodeMessage({ type: MessageType.METHOD_RETURN, serial: 2, replySerial: 1, signature, body })).toBeUndefined();
  });
});
