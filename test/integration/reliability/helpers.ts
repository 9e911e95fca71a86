import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { DBusError, Message, type MessageBus } from 'dbus-next';
import { connectBus } from '../../../src/dbus/bus-address.js';
import { recordJournalFile } from '../../../src/machine/paths.js';
import { decodeJournal } from '../../../src/store/record-journal.js';
import { MANAGER_PATH, machineObjectPath } from '../../../src/machine/names.js';
import { startAgent, type AgentProcess, type AgentProcessOptions } from '../../support/agent-process.js';
import { BUS_NAME } from '../../support/busctl.js';
import { startSessionBus, type PrivateBus } from '../../support/dbus-daemon.js';
import { LIBVIRT_CACHE_DIR } from '../../support/guest-images.js';
import { startLibvirtd, type PrivateLibvirtd } from '../../support/libvirtd.js';

// Shared plumbing for the reliability suites: a raw dbus-next client (much faster than busctl),
// config files, record-file inspection, and the rig each suite starts (bus, agent, client).

const MANAGER_IFACE = 'org.vmkeeper1.Manager';
const MACHINE_IFACE = 'org.vmkeeper1.Machine';
export const isRoot = process.getuid?.() === 0;

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
  const r = await rawCall(bus, { path: machineObjectPath(name), iface: 'org.freedesktop.DBus.Properties', member: 'Get', signature: 'ss', body: [MACHINE_IFACE, prop] }, timeoutMs);
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

export interface ConfigOptions {
  callTimeoutSec?: number;
  pollIntervalMs?: number;
  sweepIntervalSec?: number;
  resyncIntervalSec?: number;
  shutdownRetryIntervalSec?: number;
  defaultGracePeriodSec?: number;
  defaultDomainType?: 'kvm' | 'qemu';
  logLevel?: string;
  authorization?: 'auto' | 'polkit' | 'bus-policy';
}

/** Writes a config file for the agent (flags still give bus, uri, dirs). */
export async function writeConfig(file: string, o: ConfigOptions = {}): Promise<string> {
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
    ...(o.authorization ? [`authorization: ${o.authorization}`] : []),
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
  await overlayRecordJournal(stateDir, records);
  return { records, others };
}

/**
 * The record journal holds writes not yet checkpointed into record files, and they are as durable
 * as the files: the agent replays them over the files on load. So the durable state is the files
 * with the journal's whole frames applied in order, read with the agent's own decoder.
 */
async function overlayRecordJournal(stateDir: string, records: Map<string, RecordFile>): Promise<void> {
  const bytes = await readFile(recordJournalFile(stateDir)).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') return Buffer.alloc(0);
    throw err;
  });
  for (const batch of decodeJournal(bytes).batches) {
    for (const op of batch) {
      if (op.record === null) records.delete(op.name);
      else records.set(op.name, { file: records.get(op.name)?.file ?? `${op.name}.json`, record: op.record as unknown as Record<string, any> });
    }
  }
}

export async function listDir(dir: string): Promise<string[]> {
  return (await readdir(dir).catch(() => [] as string[])).sort();
}

export { prng } from '../../support/prng.js';

/** A one-line D-Bus error message carries no stack trace and no source paths. */
export function looksLikeStackTrace(message: string): boolean {
  return /\n\s*at\s/.test(message) || /\bat .*\.(ts|js):\d+:\d+/.test(message) || /node_modules|file:\/\//.test(message);
}

export interface RigOptions {
  /** Prefix of the temp folder (dir) under os.tmpdir(). */
  prefix: string;
  /** The bus to start; default: a session-like bus. */
  startBus?: () => Promise<PrivateBus>;
  /** A private real libvirtd in dir/lv (root only) instead of libvirt's test driver on dir/node.xml. */
  libvirtd?: boolean;
  /** Written to dir/config.yaml and passed to the agent; without it the project's config/config.yaml. */
  config?: ConfigOptions;
  /** Runs once dir, dir/images and dir/node.xml exist; what it returns overrides the agent's options. */
  prepare?: (dir: string) => Promise<Partial<AgentProcessOptions> | void>;
  /** Start the agent (default) or leave that to the test (`rig.agent` stays undefined). */
  startAgent?: boolean;
  /** Runs at stop() after the agent, libvirtd and the bus are stopped, before dir is removed. */
  cleanup?: () => void | Promise<void>;
}

/** What a reliability suite runs against: a private bus, the real agent, a raw client. */
export interface Rig {
  dir: string;
  bus: PrivateBus;
  /** With `libvirtd: true`; a test that restarts it assigns the new one here, for stop(). */
  libvirtd?: PrivateLibvirtd;
  opts: AgentProcessOptions;
  agent?: AgentProcess;
  client: MessageBus;
  /** Closes the client, stops agent, libvirtd and bus, runs `cleanup`, removes dir. */
  stop(): Promise<void>;
}

/** A private libvirtd in DIR/lv, sharing the persistent qemu capability cache. */
export const startTestLibvirtd = (dir: string) => startLibvirtd({ runDir: path.join(dir, 'lv'), cacheDir: LIBVIRT_CACHE_DIR });

/** Starts a Rig; when a step fails, stops what was started and rethrows. */
export async function startRig(o: RigOptions): Promise<Rig> {
  const rig = { dir: await mkdtemp(path.join(os.tmpdir(), o.prefix)) } as Rig;
  rig.stop = async () => {
    closeClient(rig.client);
    await rig.agent?.stop();
    await rig.libvirtd?.stop();
    await rig.bus?.stop();
    await o.cleanup?.();
    await rm(rig.dir, { recursive: true, force: true });
  };
  try {
    const { dir } = rig;
    await mkdir(path.join(dir, 'images'));
    await writeFile(path.join(dir, 'node.xml'), '<node/>');
    if (o.libvirtd) rig.libvirtd = await startTestLibvirtd(dir);
    rig.bus = await (o.startBus ?? startSessionBus)();
    rig.opts = {
      busAddress: rig.bus.address,
      stateDir: path.join(dir, 'state'),
      imageDir: path.join(dir, 'images'),
      libvirtUri: rig.libvirtd?.uri ?? `test://${dir}/node.xml`,
      ...(o.config ? { configFile: await writeConfig(path.join(dir, 'config.yaml'), o.config) } : {}),
      ...(await o.prepare?.(dir)),
    };
    if (o.startAgent ?? true) rig.agent = await startAgent(rig.opts);
    rig.client = await openClient(rig.bus.address);
    return rig;
  } catch (err) {
    await rig.stop().catch(() => undefined);
    throw err;
  }
}
