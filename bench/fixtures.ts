// Benchmark fixtures: N machine records written straight into a state dir, plus a libvirt test
// driver node.xml that already holds their (shut off) domains, so the agent starts on N settled
// machines without defining anything. And a private dbus-daemon + the real agent process.
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { RECORD_API_VERSION, newStatus, type MachineRecord } from '../src/machine/record.js';
import { domainNameFor } from '../src/machine/names.js';
import { spawnAgent, type AgentProcess } from '../test/support/agent-process.js';
import { PROJECT_ROOT, startSessionBus, type PrivateBus } from '../test/support/dbus-daemon.js';

/**
 * Benchmarks run the built agent (dist/main.js with NODE_ENV=production, as the packages and the
 * unit run it), built once per process; VMKEEPER_BENCH_FROM_SOURCE=1 runs the sources through tsx
 * instead, whose loader and source maps cost about a hundred MiB of RSS with 10,000 machines.
 */
export const benchFromSource = process.env.VMKEEPER_BENCH_FROM_SOURCE === '1';
let built: Promise<void> | undefined;
export function buildAgentOnce(): Promise<void> {
  built ??= (async () => {
    // Without its domain-events addon the agent polls libvirt: a fresh checkout after `npm ci`
    // alone has none, and would measure the poll where the bench means events.
    if (!existsSync(path.join(PROJECT_ROOT, 'native/build/Release/domain_events.node'))) await npmRun('build:native');
    if (!benchFromSource) await npmRun('build:ts');
  })();
  return built;
}

/** One of package.json's build steps. */
function npmRun(script: string): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const child = spawn('npm', ['run', '--silent', script], { stdio: 'inherit', cwd: PROJECT_ROOT });
    child.once('error', reject);
    child.once('exit', (code) => (code === 0 ? resolve() : reject(new Error(`npm run ${script} failed: exit ${code}`))));
  });
}

/**
 * With VMKEEPER_BENCH_DOMAINS=default the figures are meant with domain events: a bench agent
 * that fell back to polling (it logs why, as a warning) would print the poll's cost as theirs.
 */
export function requireDomainEvents(agent: AgentProcess): void {
  if (BENCH_DOMAINS !== 'default') return;
  const warning = agent.output().split('\n').find((l) => l.includes('domain events are unavailable'));
  if (warning) throw new Error(`the bench agent polls libvirt instead of following domain events: ${warning.trim()}`);
}

/** How many records the agent's start took from the record snapshot (its info line; 0 when none). */
export function recordsFromSnapshot(agent: AgentProcess): number {
  const m = /loaded \d+ machine records from .* \((\d+) unchanged since the last clean stop/.exec(agent.output());
  return m ? Number(m[1]) : 0;
}

/** The V8 options the packages run vmkeeperd with (packaging/node-flags). */
export function packagedNodeFlags(): string[] {
  return readFileSync(path.join(PROJECT_ROOT, 'packaging/node-flags'), 'utf8').replace(/#.*/g, '').split(/\s+/).filter(Boolean);
}
/**
 * The environment the unit gives vmkeeperd (its Environment= lines): the pool size decides how
 * many threads, and so how many malloc arenas, the agent has. One plain KEY=VALUE per line; a
 * line this does not understand fails the bench rather than being measured without.
 */
export function unitEnvironment(): Record<string, string> {
  const env: Record<string, string> = {};
  for (const line of readFileSync(path.join(PROJECT_ROOT, 'systemd/vmkeeperd.service'), 'utf8').split('\n')) {
    if (!line.startsWith('Environment=')) continue;
    const m = /^Environment=([A-Za-z_][A-Za-z0-9_]*)=([^\s"'$%\\]*)$/.exec(line);
    if (!m) throw new Error(`systemd/vmkeeperd.service: not one plain KEY=VALUE: ${line}`);
    env[m[1]!] = m[2]!;
  }
  return env;
}

/**
 * spawnAgent options for the form benchmarks run: the packaged one (node flags, the unit's
 * environment); VMKEEPER_BENCH_NODE_ARGS replaces the node options.
 */
export function benchAgentForm(): { built: boolean; env: NodeJS.ProcessEnv; nodeArgs: string[] } {
  const override = process.env.VMKEEPER_BENCH_NODE_ARGS?.split(' ').filter(Boolean);
  if (benchFromSource) return { built: false, env: unitEnvironment(), nodeArgs: override ?? [] };
  return { built: true, env: { ...unitEnvironment(), NODE_ENV: 'production' }, nodeArgs: override ?? packagedNodeFlags() };
}

/** The bench agent's form in one line, for a bench's heading: its environment and node options. */
export function agentFormText(): string {
  const form = benchAgentForm();
  const env = Object.entries(form.env).map(([k, v]) => `${k}=${v}`).join(' ');
  return `${env}, node ${form.nodeArgs.join(' ') || '(no options)'}`;
}

export const machineName = (i: number) => `vm-${String(i).padStart(5, '0')}`;

/** A settled record as the agent stores it (one write after creation, domain defined). */
export function settledRecord(name: string, uuid: string, r: Pick<MachineRecord, 'annotations' | 'spec' | 'status'>): MachineRecord {
  return {
    apiVersion: RECORD_API_VERSION,
    name,
    uuid,
    domainName: domainNameFor(name),
    createdAt: Date.now(),
    deletionTimestamp: 0,
    deletionGracePeriodSec: 0,
    resourceVersion: 1,
    ...r,
  };
}

/** Writes each record to DIR/<name>.json (created 0700) as the file store does, 500 at a time. */
export async function writeRecordFiles(dir: string, records: MachineRecord[]): Promise<void> {
  await mkdir(dir, { recursive: true, mode: 0o700 });
  for (let i = 0; i < records.length; i += 500) {
    await Promise.all(
      records.slice(i, i + 500).map((record) =>
        writeFile(path.join(dir, `${record.name}.json`), `${JSON.stringify(record, null, 2)}\n`, { mode: 0o600 }),
      ),
    );
  }
}

/** The spec of every bench machine: a direct-boot kernel in imageDir, no disks, powered off. */
export function benchSpec(imageDir: string): MachineRecord['spec'] {
  return { cpus: 1, memoryMiB: 64, domainType: 'qemu', boot: { kernel: `${imageDir}/vmlinuz` }, disks: [], nics: [], power: 'off' };
}

export async function writeMachines(dir: string, count: number): Promise<{ stateDir: string; imageDir: string; uri: string }> {
  const stateDir = path.join(dir, 'state');
  const imageDir = path.join(dir, 'images');
  await mkdir(imageDir, { recursive: true });
  // The kernel the specs name: the test driver never reads it, but a define checks that it is there.
  await writeFile(path.join(imageDir, 'vmlinuz'), '');
  const records = Array.from({ length: count }, (_, i) =>
    settledRecord(machineName(i), randomUUID(), {
      annotations: { owner: 'bench' },
      spec: benchSpec(imageDir),
      status: { ...newStatus(), state: 'stopped', domainDefined: true },
    }),
  );
  await writeRecordFiles(path.join(stateDir, 'machines'), records);
  const domains = records.map(
    (r) =>
      `<domain type='test'><name>${r.domainName}</name><uuid>${r.uuid}</uuid><memory>65536</memory><vcpu>1</vcpu><os><type>hvm</type></os><test:runstate>5</test:runstate></domain>`,
  );
  const nodeXml = path.join(dir, 'node.xml');
  await writeFile(nodeXml, `<node xmlns:test='http://libvirt.org/schemas/domain/test/1.0'>\n${domains.join('\n')}\n</node>\n`);
  return { stateDir, imageDir, uri: `test://${nodeXml}` };
}

export interface BenchAgent {
  dir: string;
  bus: PrivateBus;
  agent: AgentProcess;
  close(): Promise<void>;
}

/**
 * Where the bench agent's domains live. "file" (the default): a test:///<file> node file with every
 * domain, loaded at start; that driver has no domain events for the agent, so it polls. "default":
 * the shared in-process test:///default, which has events; it starts empty, so the agent defines
 * every domain from its records first (wait with settleAfterDefines before measuring).
 */
export const BENCH_DOMAINS = process.env.VMKEEPER_BENCH_DOMAINS === 'default' ? 'default' : 'file';

/** A private bus and the real agent (from source, via tsx) on `count` pre-written machines. */
export async function startBenchAgent(count: number, env: NodeJS.ProcessEnv = {}, extraNodeArgs: string[] = []): Promise<BenchAgent> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'vmk-bench-'));
  const written = await writeMachines(dir, count);
  const { stateDir, imageDir } = written;
  const uri = BENCH_DOMAINS === 'default' ? 'test:///default' : written.uri;
  const bus = await startSessionBus();
  const configFile = path.join(dir, 'config.yaml');
  // VMKEEPER_BENCH_CONFIG: YAML sections added to the agent's config, e.g. "machines: {pollIntervalMs: 60000}".
  const extra = process.env.VMKEEPER_BENCH_CONFIG ? `${process.env.VMKEEPER_BENCH_CONFIG}\n` : '';
  const level = process.env.BENCH_LOG ? 'debug' : 'warn';
  await writeFile(configFile, `log:\n  level: ${level}\n${extra}`);
  await buildAgentOnce();
  const form = benchAgentForm();
  const agent = spawnAgent({ busAddress: bus.address, stateDir, imageDir, libvirtUri: uri, configFile, extraArgs: ['--log-level', level], built: form.built, env: { ...form.env, ...env }, nodeArgs: [...form.nodeArgs, ...extraNodeArgs] });
  await agent.ready(Number(process.env.BENCH_READY_MS ?? 180_000));
  return {
    dir,
    bus,
    agent,
    async close() {
      await agent.stop();
      await bus.stop();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** Receives sd_notify datagrams on a socket it creates (python3: Node cannot bind AF_UNIX DGRAM). */
export function notifyReceiver(socketPath: string): { listening: Promise<void>; ready: Promise<number>; stop(): void } {
  const py = `
import socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
print("LISTENING", flush=True)
while True:
    data = s.recv(65536).decode()
    print("%.6f %s" % (time.time(), data.replace("\\n", " ")), flush=True)
`;
  const child = spawn('python3', ['-c', py, socketPath], { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  let listening: () => void;
  const isListening = new Promise<void>((r) => (listening = r));
  const ready = new Promise<number>((resolve) => {
    child.stdout.on('data', (c: Buffer) => {
      out += c.toString();
      if (out.includes('LISTENING')) listening();
      const m = /^(\d+\.\d+) .*READY=1/m.exec(out);
      if (m) resolve(Number(m[1]) * 1000);
    });
  });
  return { listening: isListening, ready, stop: () => child.kill('SIGTERM') };
}

/**
 * Waits until the process has used less than maxShare of a core over each of the last two
 * windowMs windows (start-up work done), or deadlineMs passed; returns how long it took.
 */
export async function waitUntilQuiet(pid: number, maxShare = 0.1, windowMs = 2000, deadlineMs = 300_000): Promise<number> {
  const { cpuSeconds } = await import('./load-run.js');
  const t0 = Date.now();
  let quiet = 0;
  while (quiet < 2 && Date.now() - t0 < deadlineMs) {
    const c0 = cpuSeconds(pid);
    await new Promise((r) => setTimeout(r, windowMs)); // a measuring window, not synchronisation
    quiet = cpuSeconds(pid) - c0 < (maxShare * windowMs) / 1000 ? quiet + 1 : 0;
  }
  return Date.now() - t0;
}

/**
 * With test:///default the agent defines every domain at each start, and V8's memory reducer
 * returns that burst's heap over the next 30-60 s (mark-compacts of 0.1-0.5 s of CPU). That is
 * the fixture's start-up, not idling: wait until two 10 s windows in a row stay under 3% of a core
 * (the steady state, a resync every 30 s, is 0.4-0.9% with 10,000 machines). Elsewhere: waitUntilQuiet.
 */
export function settleAfterDefines(pid: number): Promise<number> {
  return BENCH_DOMAINS === 'default' ? waitUntilQuiet(pid, 0.03, 10_000) : waitUntilQuiet(pid);
}
