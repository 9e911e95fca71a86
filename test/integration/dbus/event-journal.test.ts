import { spawn, type ChildProcess } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NOBODY, busctlCall, busctlGetProperty, dbusSend, ensureUserInGroup, run, type RunAs } from '../../support/busctl.js';
import { startSystemBus, type PrivateBus } from '../../support/dbus-daemon.js';
import { startAgent, type AgentProcess, type AgentProcessOptions } from '../../support/agent-process.js';
import { waitFor } from '../../support/wait.js';

// The real agent on libvirt's test driver and a system-like bus with the project's policy: the
// sequenced journal (who did what, cursors, expiry), compare-and-set and idempotent create, seen
// through busctl and dbus-send, and through an independent dbus-python client across a restart.

const MANAGER = ['/org/vmkeeper1', 'org.vmkeeper1.Manager'] as const;
const SPEC = JSON.stringify({ cpus: 1, memoryMiB: 128, disks: [{ name: 'root', sizeGiB: 1 }] });
const CLIENT = path.join(path.dirname(new URL(import.meta.url).pathname), 'clients/journal_client.py');
// The distribution's interpreter, which carries python3-dbus (not a virtualenv's).
const PYTHON = '/usr/bin/python3';
const isRoot = process.getuid?.() === 0;

type EventRow = [number, number, string, string, string, string, string, string];

let bus: PrivateBus;
let dir: string;
let opts: AgentProcessOptions;
let agent: AgentProcess;

const call = (method: string, sig = '', args: (string | number)[] = [], as?: RunAs) => busctlCall(bus.address, ...MANAGER, method, sig, args, { as });
const send = (member: string, args: string[] = [], as?: RunAs) => dbusSend(bus.address, MANAGER[0], `${MANAGER[1]}.${member}`, args, { as });
const since = async (after: number, machine = '') => {
  const [events, next] = (await call('ListEventsSince', 'ts', [after, machine])).data as [EventRow[], number];
  return { events, next };
};
const machinePath = (name: string) => `/org/vmkeeper1/machine/${name.replace(/-/g, '_2d')}`;
/** A machine that has settled: the agent itself no longer moves its ResourceVersion. */
const running = (name: string) =>
  waitFor(async () => (await busctlGetProperty(bus.address, machinePath(name), 'org.vmkeeper1.Machine', 'State')).data === 'running', { timeoutMs: 20_000, what: `${name} running` });
const version = async (name: string) => Number((await busctlGetProperty(bus.address, machinePath(name), 'org.vmkeeper1.Machine', 'ResourceVersion')).data);

beforeAll(async () => {
  bus = await startSystemBus();
  dir = await mkdtemp(path.join(os.tmpdir(), 'vmkeeper-journal-'));
  await mkdir(path.join(dir, 'images'));
  await writeFile(path.join(dir, 'node.xml'), '<node/>');
  opts = { busAddress: bus.address, stateDir: path.join(dir, 'state'), imageDir: path.join(dir, 'images'), libvirtUri: `test://${dir}/node.xml` };
  agent = await startAgent(opts);
}, 60_000);

afterAll(async () => {
  await agent?.stop();
  await bus?.stop();
  await rm(dir, { recursive: true, force: true });
});

describe.skipIf(!isRoot)('event journal, compare-and-set and callers over D-Bus', () => {
  it('sequences events and names the caller: its uid from the bus, the member it called; the agent\'s own name none', async () => {
    const operator = await ensureUserInGroup('vmkeeper-journal-op', 'vmkeeper');
    const uid = (await run('id', ['-u', operator.user])).stdout.trim();
    await call('CreateMachine', 'ss', ['seq-1', SPEC]);
    await call('SetMachineAnnotations', 'sa{ss}', ['seq-1', 1, 'owner', 'ops'], operator);
    const page = await waitFor(async () => {
      const p = await since(0, 'seq-1');
      return p.events.some((e) => e[4] === 'Started') && p.events.some((e) => e[4] === 'AnnotationsChanged') ? p : undefined;
    }, { timeoutMs: 20_000, what: 'seq-1 Created, Started and AnnotationsChanged' });
    const byReason = (r: string) => page.events.find((e) => e[4] === r)!;
    expect(byReason('Created').slice(6)).toEqual(['0', 'CreateMachine']);
    expect(byReason('AnnotationsChanged').slice(6)).toEqual([uid, 'SetMachineAnnotations']);
    expect(byReason('Started').slice(6)).toEqual(['', '']);
    const seqs = page.events.map((e) => e[0]);
    expect(seqs).toEqual([...seqs].sort((a, b) => a - b));
    expect(page.next).toBeGreaterThanOrEqual(seqs.at(-1)!);
    expect(agent.output()).toMatch(/seq-1: annotations replaced.*uid=/);
  }, 60_000);

  it('a stale expected version is Conflict naming the current one, and changes nothing; the right one writes', async () => {
    await call('CreateMachine', 'ss', ['cas-1', SPEC]);
    await running('cas-1');
    const v = await version('cas-1');
    const stale = await send('SetMachineAnnotationsIfVersion', ['string:cas-1', 'dict:string:string:k,v', `uint64:${v + 100}`]);
    expect(stale).toMatchObject({ ok: false, errorName: 'org.vmkeeper1.Error.Conflict' });
    expect(stale.message).toContain(`version ${await version('cas-1')}`);
    expect(await version('cas-1')).toBe(v);
    const power = await send('SetMachinePowerIfVersion', ['string:cas-1', 'string:off', `uint64:${v + 100}`]);
    expect(power.errorName).toBe('org.vmkeeper1.Error.Conflict');
    const del = await send('DeleteMachineIfVersion', ['string:cas-1', `uint64:${v + 100}`]);
    expect(del.errorName).toBe('org.vmkeeper1.Error.Conflict');
    const current = await version('cas-1');
    expect((await send('SetMachineAnnotationsIfVersion', ['string:cas-1', 'dict:string:string:k,v', `uint64:${current}`])).ok).toBe(true);
    expect(await version('cas-1')).toBeGreaterThan(current);
  }, 60_000);

  it('CreateMachine again with the same spec returns the same path; another spec is MachineExists', async () => {
    const first = await call('CreateMachine', 'ss', ['idem-1', SPEC]);
    const again = await call('CreateMachine', 'ss', ['idem-1', SPEC]);
    expect(again.data).toEqual(first.data);
    const other = await send('CreateMachine', ['string:idem-1', `string:${SPEC.replace('"cpus":1', '"cpus":2')}`]);
    expect(other.errorName).toBe('org.vmkeeper1.Error.MachineExists');
    expect((await since(0, 'idem-1')).events.filter((e) => e[4] === 'Created')).toHaveLength(1);
  }, 60_000);

  it('the bus policy lets everyone read the journal, and only operators compare-and-set', async () => {
    expect((await send('ListEventsSince', ['uint64:0', 'string:'], NOBODY)).ok).toBe(true);
    const write = await send('SetMachineAnnotationsIfVersion', ['string:seq-1', 'dict:string:string:k,v', 'uint64:0'], NOBODY);
    expect(write.errorName).toBe('org.freedesktop.DBus.Error.AccessDenied');
  });

  it('refuses a cursor ahead of the journal with EventsExpired, and a bad machine name with InvalidName', async () => {
    const last = (await since(0)).next;
    expect((await send('ListEventsSince', [`uint64:${last + 1000}`, 'string:'])).errorName).toBe('org.vmkeeper1.Error.EventsExpired');
    expect((await send('ListEventsSince', ['uint64:0', 'string:Not_A_Name'])).errorName).toBe('org.vmkeeper1.Error.InvalidName');
  });

  it('an independent dbus-python client follows by sequence across an agent restart, no gap, no duplicate', async () => {
    const client = spawnClient(['follow', bus.address]);
    try {
      await client.waitFor((l) => 'synced' in l, 'the client to list');
      await call('CreateMachine', 'ss', ['follow-1', SPEC]);
      await call('SetMachinePower', 'ss', ['follow-1', 'off']);
      const before = (await since(0)).next;
      await client.waitFor((l) => l.sequence === before, `the client to reach ${before}`);
      await agent.stop();
      agent = await startAgent(opts);
      await call('CreateMachine', 'ss', ['follow-2', SPEC]);
      await call('SetMachineAnnotations', 'sa{ss}', ['follow-2', 1, 'after', 'restart']);
      const last = await waitFor(async () => {
        const p = await since(before);
        return p.events.some((e) => e[2] === 'follow-2' && e[4] === 'AnnotationsChanged') ? p.next : undefined;
      }, { timeoutMs: 20_000, what: 'follow-2 events' });
      const all: number[] = [];
      for (let cursor = 0; ;) {
        const p = await since(cursor);
        all.push(...p.events.map((e) => e[0]));
        if (p.events.length < 500) break;
        cursor = p.next;
      }
      expect(all.at(-1)).toBeGreaterThanOrEqual(last);
      // The reconciler may add events meanwhile: compare what both have seen.
      await client.waitFor((l) => l.sequence === all.at(-1), `the client to reach ${all.at(-1)}`);
      const printed = client.lines().filter((l) => 'sequence' in l).map((l) => l.sequence as number);
      expect(printed.slice(0, all.length)).toEqual(all);
      expect(new Set(printed).size).toBe(printed.length);
      expect(printed.every((s, i) => i === 0 || s === printed[i - 1]! + 1)).toBe(true);
      expect(printed.at(-1)).toBeGreaterThan(before);
    } finally {
      await client.stop();
    }
  }, 120_000);

  it('an independent dbus-python client: of two writers with the same expected version, one gets Conflict', async () => {
    await call('CreateMachine', 'ss', ['race-1', SPEC]);
    await running('race-1');
    const client = spawnClient(['race', bus.address, 'race-1']);
    const [outcome] = await client.waitFor((l) => 'version' in l, 'the race outcome');
    await client.stop();
    expect(outcome).toMatchObject({ ok: [0], errors: [{ writer: 1, name: 'org.vmkeeper1.Error.Conflict' }], annotations: { writer: '0' } });
  }, 60_000);
});

type Line = Record<string, unknown>;

function spawnClient(args: string[]) {
  const child: ChildProcess = spawn(PYTHON, [CLIENT, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  const lines: Line[] = [];
  let partial = '';
  let stderr = '';
  child.stdout!.on('data', (chunk: Buffer) => {
    partial += chunk.toString();
    const parts = partial.split('\n');
    partial = parts.pop()!;
    for (const p of parts) if (p.trim()) lines.push(JSON.parse(p) as Line);
  });
  child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  return {
    lines: () => lines,
    waitFor: (match: (l: Line) => boolean, what: string) =>
      waitFor(() => {
        const found = lines.filter(match);
        return found.length > 0 ? found : undefined;
      }, { timeoutMs: 30_000, what: `${what} (client stderr: ${stderr.trim()})` }),
    async stop() {
      if (child.exitCode === null) child.kill('SIGTERM');
      await exited;
    },
  };
}
