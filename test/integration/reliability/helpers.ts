import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdir, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { DBusError, Message, type MessageBus } from 'dbus-next';
import { connectBus } from '../../../src/dbus/bus-address.js';
import { waitFor } from '../../support/wait.js';

// Shared plumbing for the reliability suites: a raw dbus-next client (much faster than busctl),
// config files, record-file inspection, and a bus daemon that can be restarted on the same socket.

export const BUS_NAME = 'org.vmkeeper1';
export const MANAGER_PATH = '/org/vmkeeper1';
export const MANAGER_IFACE = 'org.vmkeeper1.Manager';
export const MACHINE_IFACE = 'org.vmkeeper1.Machine';
export const isRoot = process.getuid?.() === 0;

export const machinePath = (name: string) =>
  `/org/vmkeeper1/machine/${[...Buffer.from(name)].map((b) => (/[A-Za-z0-9]/.test(String.fromCharCode(b)) ? String.fromCharCode(b) : `_${b.toString(16).padStart(2, '0')}`)).join('')}`;

export type CallResult =
  | { ok: true; body: unknown[]; ms: number }
  | { ok: false; errorName: string; message: string; ms: number };

export interface RawCall {
  path: string;
  iface?: string;
  member: string;
  signature?: string;
  body?: unknown[];
  destination?: string;
}

/** A dbus-next connection that never crashes the test process when the bus goes away. */
export async function openClient(address: string): Promise<MessageBus> {
  const bus = await connectBus(address);
  bus.on('error', () => {});
  return bus;
}

export function closeClient(bus: MessageBus | undefined): void {
  try {
    bus?.disconnect();
  } catch {
    /* already closed */
  }
}

/** One method call with a client-side deadline; a local failure (marshalling) is `LocalError`. */
export async function rawCall(bus: MessageBus, c: RawCall, timeoutMs = 10_000): Promise<CallResult> {
  const started = performance.now();
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<CallResult>((resolve) => {
    timer = setTimeout(
      () => resolve({ ok: false, errorName: 'Timeout', message: `no reply within ${timeoutMs} ms`, ms: performance.now() - started }),
      timeoutMs,
    );
  });
  const attempt = (async (): Promise<CallResult> => {
    try {
      const reply = await bus.call(
        new Message({
          destination: c.destination ?? BUS_NAME,
          path: c.path,
          interface: c.iface,
          member: c.member,
          signature: c.signature ?? '',
          body: c.body ?? [],
        }),
      );
      return { ok: true, body: reply?.body ?? [], ms: performance.now() - started };
    } catch (err) {
      if (err instanceof DBusError) return { ok: false, errorName: err.type, message: String(err.text ?? ''), ms: performance.now() - started };
      return { ok: false, errorName: 'LocalError', message: (err as Error).message, ms: performance.now() - started };
    }
  })();
  try {
    return await Promise.race([attempt, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

export const manager = (bus: MessageBus, member: string, signature = '', body: unknown[] = [], timeoutMs?: number) =>
  rawCall(bus, { path: MANAGER_PATH, iface: MANAGER_IFACE, member, signature, body }, timeoutMs);

export async function managerProp(bus: MessageBus, prop: string, timeoutMs?: number): Promise<unknown> {
  const r = await rawCall(bus, { path: MANAGER_PATH, iface: 'org.freedesktop.DBus.Properties', member: 'Get', signature: 'ss', body: [MANAGER_IFACE, prop] }, timeoutMs);
  if (!r.ok) throw new Error(`${prop}: ${r.errorName}: ${r.message}`);
  return (r.body[0] as { value: unknown }).value;
}

export async function machineProp(bus: MessageBus, name: string, prop: string, timeoutMs?: number): Promise<unknown> {
  const r = await rawCall(bus, { path: machinePath(name), iface: 'org.freedesktop.DBus.Properties', member: 'Get', signature: 'ss', body: [MACHINE_IFACE, prop] }, timeoutMs);
  if (!r.ok) throw new Error(`${name}.${prop}: ${r.errorName}: ${r.message}`);
  return (r.body[0] as { value: unknown }).value;
}

/** ListMachines as [name, state, power, path][]; throws on an error reply. */
export async function listMachines(bus: MessageBus, timeoutMs?: number): Promise<Array<[string, string, string, string]>> {
  const r = await manager(bus, 'ListMachines', '', [], timeoutMs);
  if (!r.ok) throw new Error(`ListMachines: ${r.errorName}: ${r.message}`);
  return r.body[0] as Array<[string, string, string, string]>;
}

export type EventTuple = [bigint, string, string, string, string];
export async function listEvents(bus: MessageBus): Promise<EventTuple[]> {
  const r = await manager(bus, 'ListEvents');
  if (!r.ok) throw new Error(`ListEvents: ${r.errorName}: ${r.message}`);
  return r.body[0] as EventTuple[];
}

/** Waits until the agent answers ListMachines on this connection. */
export async function waitAnswering(bus: MessageBus, timeoutMs = 30_000, isDead?: () => string | undefined): Promise<void> {
  await waitFor(
    async () => {
      const dead = isDead?.();
      if (dead !== undefined) throw Object.assign(new Error(`agent exited: ${dead}`), { fatal: true });
      return (await manager(bus, 'ListMachines', '', [], 2000)).ok;
    },
    { timeoutMs, intervalMs: 25, what: 'vmkeeperd to answer' },
  );
}

/** Writes a config file for the agent (flags still give bus, uri, dirs). */
export async function writeConfig(file: string, o: {
  callTimeoutSec?: number;
  pollIntervalMs?: number;
  sweepIntervalSec?: number;
  resyncIntervalSec?: number;
  shutdownRetryIntervalSec?: number;
  defaultGracePeriodSec?: number;
  defaultDomainType?: 'kvm' | 'qemu';
  logLevel?: string;
} = {}): Promise<string> {
  const yaml = [
    'libvirt:',
    `  callTimeoutSec: ${o.callTimeoutSec ?? 30}`,
    `defaultDomainType: ${o.defaultDomainType ?? 'qemu'}`,
    'machines:',
    `  defaultGracePeriodSec: ${o.defaultGracePeriodSec ?? 60}`,
    `  sweepIntervalSec: ${o.sweepIntervalSec ?? 1}`,
    `  shutdownRetryIntervalSec: ${o.shutdownRetryIntervalSec ?? 1}`,
    `  resyncIntervalSec: ${o.resyncIntervalSec ?? 2}`,
    `  pollIntervalMs: ${o.pollIntervalMs ?? 200}`,
    'log:',
    `  level: ${o.logLevel ?? 'debug'}`,
    '',
  ].join('\n');
  await writeFile(file, yaml);
  return file;
}

export interface RecordFile {
  file: string;
  record: Record<string, any>;
}

/** Every <stateDir>/machines/*.json, parsed; throws naming the file that does not parse. */
export async function readRecordFiles(stateDir: string): Promise<{ records: Map<string, RecordFile>; others: string[] }> {
  const dir = path.join(stateDir, 'machines');
  const entries = await readdir(dir).catch(() => [] as string[]);
  const records = new Map<string, RecordFile>();
  const others: string[] = [];
  for (const f of entries) {
    if (!f.endsWith('.json')) {
      others.push(f);
      continue;
    }
    let text: string;
    try {
      text = await readFile(path.join(dir, f), 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') continue; // removed while we listed (the agent runs)
      throw err;
    }
    let record: Record<string, any>;
    try {
      record = JSON.parse(text) as Record<string, any>;
    } catch (err) {
      throw new Error(`record file ${f} does not parse: ${(err as Error).message}\n${text.slice(0, 500)}`);
    }
    if (record.name !== f.slice(0, -5)) throw new Error(`record file ${f} holds name ${String(record.name)}`);
    records.set(record.name as string, { file: f, record });
  }
  return { records, others };
}

export async function listDir(dir: string): Promise<string[]> {
  return (await readdir(dir).catch(() => [] as string[])).sort();
}

/** VmRSS of a process in KiB. */
export function rssKiB(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const m = /^VmRSS:\s+(\d+) kB/m.exec(status);
  if (!m) throw new Error(`no VmRSS for ${pid}`);
  return Number(m[1]);
}

/** utime+stime of a process in clock ticks (100 Hz on Linux). */
export function cpuTicks(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return Number(fields[11]) + Number(fields[12]);
}

/** A seeded PRNG (mulberry32): the same seed replays the same run. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * A session-like dbus-daemon on a fixed socket path, so it can be stopped and started again at
 * the same address (the shared support's buses get a new temp dir, hence a new address, each time).
 */
export class RestartableBus {
  private child: ChildProcess | undefined;
  readonly address: string;
  private readonly config: string;

  constructor(private readonly dir: string) {
    this.address = `unix:path=${path.join(dir, 'bus')}`;
    this.config = path.join(dir, 'bus.conf');
  }

  get pid(): number | undefined {
    return this.child?.pid;
  }

  async start(): Promise<void> {
    await mkdir(this.dir, { recursive: true });
    await rm(path.join(this.dir, 'bus'), { force: true });
    await writeFile(
      this.config,
      `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN" "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig><type>session</type><listen>${this.address}</listen><auth>EXTERNAL</auth>
<policy context="default"><allow send_destination="*" eavesdrop="true"/><allow eavesdrop="true"/><allow own="*"/></policy></busconfig>
`,
    );
    const child = spawn('dbus-daemon', [`--config-file=${this.config}`, '--nofork', '--nopidfile', '--print-address=1'], { stdio: ['ignore', 'pipe', 'pipe'] });
    this.child = child;
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('dbus-daemon did not print its address')), 10_000);
      child.stdout!.once('data', () => {
        clearTimeout(timer);
        resolve();
      });
      child.once('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`dbus-daemon exited with ${code}`));
      });
    });
  }

  async stop(signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
    const child = this.child;
    this.child = undefined;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    child.kill(signal);
    const timer = setTimeout(() => child.kill('SIGKILL'), 3000);
    await exited;
    clearTimeout(timer);
  }
}

/** A one-line D-Bus error message carries no stack trace and no source paths. */
export function looksLikeStackTrace(message: string): boolean {
  return /\n\s*at\s/.test(message) || /\bat .*\.(ts|js):\d+:\d+/.test(message) || /node_modules|file:\/\//.test(message);
}
