import { Variant } from 'dbus-next';
import { machineObjectPath } from '../../src/machine/names.js';

// Hostile D-Bus calls from a seeded PRNG: the same seed gives the same calls. Every generated
// message is one the bus daemon accepts (valid signatures, object paths and UTF-8 in strings), so
// whatever happens next is the agent's doing; invalid UTF-8 travels in byte arrays.

type Rand = () => number;

export interface FuzzCall {
  path: string;
  iface?: string;
  member: string;
  signature: string;
  body: unknown[];
  /** What the call is, for the report and the model of what succeeded. */
  kind: string;
}

export interface FuzzContext {
  /** Unique token placed in every hostile path, so stray files can be found afterwards. */
  marker: string;
  /** Absolute dirs outside the state dir that the agent must never touch. */
  sentinelDir: string;
  imageDir: string;
  /** Valid machine names the generator may pick, to reach deeper code. */
  names: () => string[];
}

const int = (r: Rand, n: number) => Math.floor(r() * n);
const pick = <T>(r: Rand, xs: readonly T[]): T => xs[int(r, xs.length)]!;

const MANAGER_METHODS: Record<string, string> = {
  CreateMachine: 'ss',
  GetMachine: 's',
  ListMachines: '',
  DescribeMachine: 's',
  DeleteMachine: 's',
  DeleteMachineWithGracePeriod: 'su',
  SetMachinePower: 'ss',
  SetMachineAnnotations: 'sa{ss}',
  ListEvents: '',
};
const MACHINE_METHODS: Record<string, string> = { Delete: '', DeleteWithGracePeriod: 'u', SetPower: 's', Describe: '' };

function hostileStrings(ctx: FuzzContext): string[] {
  const m = ctx.marker;
  return [
    '', ' ', 'a', '-', 'a-', '-a', 'A', 'web-1', 'x'.repeat(63), 'x'.repeat(64),
    `../${m}`, `../../../../tmp/${m}`, `/etc/shadow`, `${ctx.sentinelDir}/${m}`, `${ctx.sentinelDir}/../${m}`,
    `${ctx.imageDir}/../${m}`, `${ctx.imageDir}/../../sentinel/keep.txt`, `..`, '.', '/', `~/${m}`, `\\..\\${m}`,
    `<domain type='kvm'><name>${m}</name></domain>`, `'/><disk file='/etc/shadow'/>`, `]]><!--${m}-->`, '&amp;&lt;&#0;',
    `$(touch /tmp/${m})`, `\`touch /tmp/${m}\``, `; touch /tmp/${m}`, `| tee /tmp/${m}`, '%s%s%n%x', '{{7*7}}',
    '\u202e\u200b\ufeff', 'ü-ñ-日本', '\ud83d\ude00', '\ud800', '\udfff', // lone surrogates arrive as U+FFFD
    'null', 'true', '{}', '[]', '"', '\\', '\n\r\t', 'a\nb', 'a'.repeat(1000),
  ];
}

function hostileString(r: Rand, ctx: FuzzContext): string {
  const roll = r();
  if (roll < 0.55) return pick(r, hostileStrings(ctx));
  if (roll < 0.7) return randomJson(r, ctx, 0);
  // Huge (connectBus uses a plain socket: through usocket, messages over ~256 KB used to stall).
  if (roll < 0.75) return 'A'.repeat(pick(r, [4096, 65_536, 1_000_000]));
  if (roll < 0.8) return deepJson(pick(r, [100, 1000, 10_000, 100_000]));
  if (roll < 0.9) return randomText(r, int(r, 40));
  return pick(r, ctx.names().length ? ctx.names() : ['fz-0']);
}

function randomText(r: Rand, len: number): string {
  let s = '';
  for (let i = 0; i < len; i++) {
    const c = r() < 0.8 ? 0x20 + int(r, 0x5f) : 1 + int(r, 0xd7ff); // no NUL: the bus forbids it in strings
    s += String.fromCharCode(c);
  }
  return s;
}

function deepJson(depth: number): string {
  return `${'['.repeat(depth)}${']'.repeat(depth)}`;
}

function randomJson(r: Rand, ctx: FuzzContext, depth: number): string {
  return JSON.stringify(randomJsonValue(r, ctx, depth));
}

function randomJsonValue(r: Rand, ctx: FuzzContext, depth: number): unknown {
  const roll = r();
  if (depth > 4 || roll < 0.3) return pick(r, [null, true, false, 0, -1, 1.5, 1e308, -0, 2 ** 53 + 1, 'x', pick(r, hostileStrings(ctx))]);
  if (roll < 0.5) return Array.from({ length: int(r, 5) }, () => randomJsonValue(r, ctx, depth + 1));
  if (roll < 0.75) return mutatedSpec(r, ctx);
  const o: Record<string, unknown> = {};
  for (let i = 0; i < int(r, 5); i++) o[pick(r, ['cpus', 'memoryMiB', 'disks', 'boot', '__proto__', 'constructor', 'x', pick(r, hostileStrings(ctx))])] = randomJsonValue(r, ctx, depth + 1);
  return o;
}

/** A valid spec (a fresh object each time: mutatedSpec changes it). */
function validSpec(): Record<string, unknown> {
  return { cpus: 1, memoryMiB: 64, disks: [{ name: 'root', sizeGiB: 1 }], power: 'off', annotations: { fuzz: 'yes' } };
}

/** A valid spec with one field replaced by something hostile. */
function mutatedSpec(r: Rand, ctx: FuzzContext): Record<string, unknown> {
  const spec: Record<string, any> = validSpec();
  const h = () => pick(r, hostileStrings(ctx));
  switch (int(r, 14)) {
    case 0: spec.disks = [{ name: h(), sizeGiB: 1 }]; break;
    case 1: spec.disks = [{ name: 'root', image: h() }]; break;
    case 2: spec.boot = { kernel: h(), initrd: h(), cmdline: h() }; delete spec.disks; break;
    case 3: spec.nics = [{ name: h(), network: h() }]; break;
    case 4: spec.nics = [{ name: 'eth0', bridge: h() }]; break;
    case 5: spec.annotations = { [h()]: h() }; break;
    case 6: spec.cpus = pick(r, [0, -1, 1.5, 1e9, '1', null, 2 ** 31]); break;
    case 7: spec.memoryMiB = pick(r, [0, -1, 1e12, '64', null, 3.3]); break;
    case 8: spec.domainType = h(); break;
    case 9: spec.power = h(); break;
    case 10: spec.gracePeriodSec = pick(r, [-1, 1e10, 0.5, '5', null]); break;
    case 11: spec[h()] = 1; break;
    case 12: spec.disks = Array.from({ length: pick(r, [0, 9, 100, 1000]) }, (_, i) => ({ name: `d${i}`, sizeGiB: 1 })); break;
    default: spec.boot = { kernel: `${ctx.imageDir}/vmlinuz`, cmdline: h() }; break;
  }
  return spec;
}

/** A random complete D-Bus type (bounded nesting, well inside the spec's limit of 32). */
function randomSignature(r: Rand, depth = 0): string {
  const basic = ['y', 'b', 'n', 'q', 'i', 'u', 'x', 't', 'd', 's', 'o', 'g'];
  const roll = r();
  if (depth > 3 || roll < 0.6) return pick(r, basic);
  if (roll < 0.75) return `a${randomSignature(r, depth + 1)}`;
  if (roll < 0.85) return `a{${pick(r, basic)}${randomSignature(r, depth + 1)}}`;
  if (roll < 0.95) return `(${Array.from({ length: 1 + int(r, 3) }, () => randomSignature(r, depth + 1)).join('')})`;
  return 'v';
}

/** Splits a signature into its complete types. */
function splitSignature(sig: string): string[] {
  const out: string[] = [];
  let i = 0;
  const one = (): string => {
    const start = i;
    const c = sig[i++]!;
    if (c === 'a') one();
    else if (c === '(') {
      while (sig[i] !== ')') one();
      i++;
    } else if (c === '{') {
      one();
      one();
      i++;
    }
    return sig.slice(start, i);
  };
  while (i < sig.length) out.push(one());
  return out;
}

function randomValue(r: Rand, type: string, ctx: FuzzContext, depth = 0): unknown {
  switch (type[0]) {
    case 'y': return int(r, 256);
    case 'b': return r() < 0.5;
    case 'n': return int(r, 65536) - 32768;
    case 'q': return int(r, 65536);
    case 'i': return pick(r, [0, -1, 2 ** 31 - 1, -(2 ** 31), int(r, 1000)]);
    case 'u': return pick(r, [0, 1, 5, 60, 86_400, 86_401, 2 ** 32 - 1, int(r, 100_000)]);
    case 'x': return pick(r, [0n, -1n, 2n ** 63n - 1n, -(2n ** 63n)]);
    case 't': return pick(r, [0n, 1n, 2n ** 64n - 1n]);
    case 'd': return pick(r, [0, -0, 1.5, 1e308, -1e308, Number.MIN_VALUE, NaN, Infinity]);
    case 's': return hostileString(r, ctx);
    case 'o': return randomObjectPath(r, ctx);
    case 'g': return pick(r, ['', 's', 'a{sv}', '(ii)', 'aaay']);
    case 'v': {
      const inner = depth > 3 ? 's' : randomSignature(r, depth + 1);
      return new Variant(inner, randomValue(r, inner, ctx, depth + 1));
    }
    case 'a': {
      const elem = type.slice(1);
      if (elem === 'y') return invalidUtf8(r);
      const n = pick(r, [0, 1, 2, 5, depth === 0 && r() < 0.05 && 'ybnqiu'.includes(elem) ? 5000 : 3]);
      if (elem[0] === '{') {
        const [k, v] = splitSignature(elem.slice(1, -1));
        const o: Record<string, unknown> = {};
        for (let i = 0; i < n; i++) {
          const key = randomValue(r, k!, ctx, depth + 1);
          o[String(key)] = randomValue(r, v!, ctx, depth + 1);
        }
        // dbus-next marshals dict keys from object keys: only string-like keys survive as such.
        return k === 's' || k === 'o' || k === 'g' ? o : Object.fromEntries(Object.entries(o).map(([, val], i) => [String(i), val]));
      }
      return Array.from({ length: n }, () => randomValue(r, elem, ctx, depth + 1));
    }
    case '(': return splitSignature(type.slice(1, -1)).map((t) => randomValue(r, t, ctx, depth + 1));
    default: throw new Error(`no generator for ${type}`);
  }
}

function invalidUtf8(r: Rand): Buffer {
  return Buffer.from(pick(r, [[0xff, 0xfe], [0xc0, 0x80], [0xed, 0xa0, 0x80], [0xf8, 0x88, 0x80, 0x80, 0x80], [0x2e, 0x2e, 0x2f, 0x00]]));
}

function randomObjectPath(r: Rand, ctx: FuzzContext): string {
  const names = ctx.names();
  return pick(r, [
    '/', '/org', '/org/vmkeeper1', '/org/vmkeeper1/machine', '/org/vmkeeper1/machine/_2e_2e', '/org/vmkeeper1/machine/web_2d1',
    `/org/vmkeeper1/machine/${ctx.marker}`, '/org/vmkeeper1/machine/a/b/c', '/org/freedesktop/DBus',
    ...(names.length ? [machineObjectPath(pick(r, names))] : []),
  ]);
}

function args(r: Rand, sig: string, ctx: FuzzContext): unknown[] {
  return splitSignature(sig).map((t) => randomValue(r, t, ctx));
}

/** The next hostile call. About a fifth target real methods with the right signature and valid names. */
export function nextCall(r: Rand, ctx: FuzzContext, serial: number): FuzzCall {
  for (;;) {
    const call = oneCall(r, ctx, serial);
    if (approximateSize(call.body) < MAX_BODY) return call;
  }
}

/** Bodies stay well under the bus's message size limit. */
const MAX_BODY = 4_000_000;

function approximateSize(body: unknown): number {
  return JSON.stringify(body, (_k, v) => (typeof v === 'bigint' ? 0 : Buffer.isBuffer(v) ? v.length : v))?.length ?? 0;
}

function oneCall(r: Rand, ctx: FuzzContext, serial: number): FuzzCall {
  const names = ctx.names();
  const roll = r();
  const validName = () => (names.length && r() < 0.7 ? pick(r, names) : `fz-${serial}`);
  if (roll < 0.22) {
    // Right method, right signature, a valid name: these reach the store and can succeed.
    const member = pick(r, ['CreateMachine', 'CreateMachine', 'DeleteMachine', 'DeleteMachineWithGracePeriod', 'SetMachinePower', 'SetMachineAnnotations', 'DescribeMachine', 'GetMachine']);
    const name = member === 'CreateMachine' ? `fz-${serial}` : validName();
    const body: Record<string, unknown[]> = {
      CreateMachine: [name, JSON.stringify(r() < 0.5 ? validSpec() : mutatedSpec(r, ctx))],
      DeleteMachine: [name],
      DeleteMachineWithGracePeriod: [name, pick(r, [0, 0, 1, 86_400, 86_401, 2 ** 32 - 1])],
      SetMachinePower: [name, pick(r, ['on', 'off', 'ON', '', 'reboot', hostileString(r, ctx)])],
      SetMachineAnnotations: [name, r() < 0.5 ? { k: String(serial) } : (randomValue(r, 'a{ss}', ctx) as Record<string, string>)],
      DescribeMachine: [name],
      GetMachine: [name],
    };
    return { path: '/org/vmkeeper1', iface: 'org.vmkeeper1.Manager', member, signature: MANAGER_METHODS[member]!, body: body[member]!, kind: `valid:${member}` };
  }
  if (roll < 0.5) {
    // Right method, right signature, hostile values everywhere.
    const member = pick(r, Object.keys(MANAGER_METHODS));
    const sig = MANAGER_METHODS[member]!;
    return { path: '/org/vmkeeper1', iface: 'org.vmkeeper1.Manager', member, signature: sig, body: args(r, sig, ctx), kind: `hostile:${member}` };
  }
  if (roll < 0.62) {
    const member = pick(r, Object.keys(MACHINE_METHODS));
    const sig = r() < 0.7 ? MACHINE_METHODS[member]! : randomSignature(r);
    const path = r() < 0.6 && names.length ? machineObjectPath(pick(r, names)) : randomObjectPath(r, ctx);
    return { path, iface: 'org.vmkeeper1.Machine', member, signature: sig, body: args(r, sig, ctx), kind: `machine:${member}` };
  }
  if (roll < 0.75) {
    // Wrong signatures on real methods.
    const member = pick(r, Object.keys(MANAGER_METHODS));
    const sig = Array.from({ length: int(r, 4) }, () => randomSignature(r)).join('');
    return { path: '/org/vmkeeper1', iface: 'org.vmkeeper1.Manager', member, signature: sig, body: args(r, sig, ctx), kind: 'wrong-signature' };
  }
  if (roll < 0.87) {
    // The standard interfaces, with right and wrong arguments (Properties.Set included).
    const [iface, member, sig] = pick(r, [
      ['org.freedesktop.DBus.Properties', 'Get', 'ss'], ['org.freedesktop.DBus.Properties', 'GetAll', 's'],
      ['org.freedesktop.DBus.Properties', 'Set', 'ssv'], ['org.freedesktop.DBus.Introspectable', 'Introspect', ''],
      ['org.freedesktop.DBus.ObjectManager', 'GetManagedObjects', ''], ['org.freedesktop.DBus.Peer', 'Ping', ''],
      ['org.freedesktop.DBus.Peer', 'GetMachineId', ''], ['org.freedesktop.DBus.Properties', 'Get', randomSignature(r)],
    ] as const);
    const body = args(r, sig, ctx);
    const wellFormed = sig === 'ss' || sig === 's' || sig === 'ssv';
    if (iface === 'org.freedesktop.DBus.Properties' && wellFormed && r() < 0.6) {
      body[0] = pick(r, ['org.vmkeeper1.Manager', 'org.vmkeeper1.Machine', 'org.freedesktop.DBus.Properties', body[0]]);
      if (sig !== 's') body[1] = pick(r, ['State', 'Name', 'ForceStopAt', 'Annotations', 'Version', body[1]]);
    }
    return { path: randomObjectPath(r, ctx), iface, member, signature: sig, body, kind: `std:${member}` };
  }
  // Random member names, interfaces and paths, or no interface at all.
  const member = pick(r, ['Foo', 'create_machine', 'CreateMachine2', 'Delete', 'constructor', '__proto__', 'toString', 'hasOwnProperty', `M${int(r, 1e6)}`]);
  const iface = pick(r, [undefined, 'org.vmkeeper1.Manager', 'org.vmkeeper1.Machine', 'org.vmkeeper1.Evil', 'org.freedesktop.DBus.Properties']);
  const sig = r() < 0.5 ? '' : randomSignature(r);
  return { path: randomObjectPath(r, ctx), iface, member, signature: sig, body: args(r, sig, ctx), kind: 'random-member' };
}
