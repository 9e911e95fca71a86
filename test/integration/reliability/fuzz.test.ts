import { execFile } from 'node:child_process';
import { mkdir, readdir, stat, utimes, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { MessageBus } from 'dbus-next';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { machineObjectPath } from '../../../src/machine/names.js';
import type { AgentProcess, AgentProcessOptions } from '../../support/agent-process.js';
import type { PrivateBus } from '../../support/dbus-daemon.js';
import { nextCall, type FuzzContext } from '../../support/fuzz.js';
import { waitFor } from '../../support/wait.js';
import { closeClient, listMachines, looksLikeStackTrace, openClient, prng, rawCall, readRecordFiles, startRig, type Rig } from './helpers.js';

// Hostile input: at least FUZZ_CALLS (default 10,000) generated calls from a seeded PRNG over a
// dbus-next connection to the real agent (test driver). The agent must never crash; every reply
// is a success or a named error without a stack trace; the records on disk match what succeeded;
// and nothing outside the state directory is touched.
//
// Env: VMKEEPER_FUZZ_SEED (default 20261), VMKEEPER_FUZZ_CALLS (default 10000).

const SEED = Number(process.env.VMKEEPER_FUZZ_SEED ?? 20261);
const CALLS = Number(process.env.VMKEEPER_FUZZ_CALLS ?? 10_000);
const IN_FLIGHT = 32;
const MARKER = `vmkfz${SEED}x`;

let rig: Rig;
let dir: string;
let bus: PrivateBus;
let client: MessageBus;
let agent: AgentProcess;
let opts: AgentProcessOptions;

type Snapshot = Map<string, string>;
async function snapshot(root: string, skip: string): Promise<Snapshot> {
  const out: Snapshot = new Map();
  const walk = async (d: string) => {
    for (const e of await readdir(d, { withFileTypes: true })) {
      const p = path.join(d, e.name);
      if (p === skip) continue;
      const s = await stat(p);
      out.set(p, `${s.mode}:${s.size}:${s.mtimeMs}:${s.ctimeMs}`);
      if (e.isDirectory()) await walk(p);
    }
  };
  await walk(root);
  return out;
}

/** Files anywhere on the root filesystem and /tmp whose name carries the marker (made after `since`). */
function strayFiles(since: string): Promise<string[]> {
  return new Promise((resolve) => {
    execFile('find', ['/', '/tmp', '-xdev', '-newer', since, '-name', `*${MARKER}*`, '-not', '-path', `${opts.stateDir}/*`],
      { timeout: 120_000, maxBuffer: 1 << 24 }, (_err, stdout) => resolve(stdout.split('\n').filter(Boolean)));
  });
}

const ERROR_NAME = /^(org\.vmkeeper1\.Error\.[A-Za-z]+|org\.freedesktop\.DBus\.Error\.[A-Za-z]+)$/;

describe('hostile input: fuzzed D-Bus calls', () => {
  beforeAll(async () => {
    rig = await startRig({
      prefix: 'vmk-fuzz-',
      config: { pollIntervalMs: 200, logLevel: 'info', defaultGracePeriodSec: 1 },
      prepare: async (d) => {
        await mkdir(path.join(d, 'sentinel'));
        await writeFile(path.join(d, 'images', 'vmlinuz'), 'not a kernel');
        await writeFile(path.join(d, 'sentinel', 'keep.txt'), 'must not change');
      },
    });
    ({ dir, bus, opts, client } = rig);
    agent = rig.agent!;
  }, 60_000);

  afterAll(async () => {
    closeClient(client); // the test may have replaced rig.client after a stall
    await rig?.stop();
  });

  it(`survives ${CALLS} hostile calls (seed ${SEED})`, async () => {
    console.log(`fuzz: seed=${SEED} calls=${CALLS} (VMKEEPER_FUZZ_SEED / VMKEEPER_FUZZ_CALLS to replay)`);
    const stamp = path.join(dir, 'stamp');
    await writeFile(stamp, '');
    // -newer compares mtimes: date the stamp a second back, so whatever is made from now on is newer.
    const past = new Date(Date.now() - 1000);
    await utimes(stamp, past, past);
    const before = await snapshot(dir, opts.stateDir);

    const random = prng(SEED);
    // Last successful create or delete per name, in reply order: a name can be deleted and then
    // created again, which two plain sets (created minus deleted) would get wrong.
    const present = new Map<string, boolean>();
    let creates = 0;
    let deletes = 0;
    const presentNames = () => [...present].filter(([, here]) => here).map(([name]) => name);
    const annotationsSet = new Map<string, string[]>();
    const ctx: FuzzContext = { marker: MARKER, sentinelDir: path.join(dir, 'sentinel'), imageDir: opts.imageDir, names: presentNames };
    const byOutcome = new Map<string, number>();
    const bad: string[] = [];
    let sent = 0;
    const recent: string[] = [];
    const stalls: string[] = [];
    const stalledClients = new Set<MessageBus>();
    let localErrors = 0;
    let serial = 0;
    const latencies: number[] = [];

    const t0 = performance.now();
    const lane = async () => {
      while (sent < CALLS) {
        const call = nextCall(random, ctx, serial++);
        const desc = `${call.kind} ${call.path} ${call.iface}.${call.member}(${call.signature}) ${JSON.stringify(call.body, (_k, v) => (typeof v === 'bigint' ? String(v) : Buffer.isBuffer(v) ? `buf:${v.toString('hex')}` : typeof v === 'string' && v.length > 60 ? `${v.slice(0, 30)}..(${v.length})` : v)).slice(0, 200)}`;
        recent.push(desc);
        if (recent.length > 40) recent.shift();
        const r = await rawCall(client, call, 15_000);
        if (!r.ok && r.errorName === 'LocalError') {
          localErrors++; // dbus-next refused to marshal it: never reached the bus
          continue;
        }
        sent++;
        latencies.push(r.ms);
        if (!r.ok && r.errorName === 'Timeout') {
          // Our own connection wedged (as dbus-next did over usocket with large messages): the
          // agent must still answer a fresh connection, and such stalls are counted.
          const fresh = await openClient(bus.address);
          const probe = await rawCall(fresh, { path: '/org/vmkeeper1', iface: 'org.vmkeeper1.Manager', member: 'ListMachines' }, 5000);
          if (!probe.ok) {
            closeClient(fresh);
            throw new Error(`the agent stopped answering after ${call.kind}: ${desc}\n${agent.output().slice(-3000)}`);
          }
          if (client !== fresh && stalledClients.add(client)) {
            stalls.push(desc);
            const old = client;
            client = fresh;
            closeClient(old);
          } else closeClient(fresh);
          continue;
        }
        if (sent % 1000 === 0) console.log(`fuzz: ${sent} calls, ${((performance.now() - t0) / 1000).toFixed(1)} s`);
        if (r.ms > 5000) console.log(`fuzz: slow ${call.kind} ${r.ok ? 'ok' : r.errorName} ${r.ms.toFixed(0)} ms: ${JSON.stringify(call.body, (_k, v) => (typeof v === 'bigint' ? String(v) : typeof v === 'string' && v.length > 80 ? `${v.slice(0, 40)}..(${v.length})` : v)).slice(0, 300)}`);
        const key = r.ok ? `${call.kind} -> ok` : `${call.kind} -> ${r.errorName}`;
        byOutcome.set(key, (byOutcome.get(key) ?? 0) + 1);
        if (!r.ok) {
          if (!ERROR_NAME.test(r.errorName)) bad.push(`${call.kind}: unnamed error ${r.errorName}: ${r.message.slice(0, 300)}`);
          if (looksLikeStackTrace(r.message)) bad.push(`${call.kind}: stack trace in ${r.errorName}: ${r.message.slice(0, 500)}`);
          if (r.errorName === 'org.freedesktop.DBus.Error.Failed') bad.push(`${call.kind}: generic Failed: ${r.message.slice(0, 300)}`);
          if (r.errorName === 'org.freedesktop.DBus.Error.NoReply') bad.push(`${call.kind}: no reply`);
          continue;
        }
        // Whatever succeeded, hostile or not, is part of the model of what must be stored.
        const member = call.member;
        const onManager = call.iface === 'org.vmkeeper1.Manager' && call.path === '/org/vmkeeper1';
        const machineName = (call.iface === 'org.vmkeeper1.Machine' && ctx.names().find((x) => call.path === machineObjectPath(x))) || undefined;
        const deletedName = onManager && (member === 'DeleteMachine' || member === 'DeleteMachineWithGracePeriod') ? String(call.body[0])
          : machineName && (member === 'Delete' || member === 'DeleteWithGracePeriod') ? machineName : undefined;
        if (onManager && member === 'CreateMachine') {
          present.set(String(call.body[0]), true);
          creates++;
        }
        if (deletedName !== undefined) {
          present.set(deletedName, false);
          deletes++;
        }
        if (onManager && member === 'SetMachineAnnotations') {
          const list = annotationsSet.get(String(call.body[0])) ?? [];
          list.push(JSON.stringify(call.body[1]));
          annotationsSet.set(String(call.body[0]), list);
        }
      }
    };
    await Promise.all(Array.from({ length: IN_FLIGHT }, lane));
    const seconds = (performance.now() - t0) / 1000;
    expect(agent.child.exitCode, `agent died:\n${agent.output().slice(-3000)}`).toBeNull();

    // Settle: every successful deletion finishes (test driver: shutdown is instant).
    const expected = presentNames().sort();
    await waitFor(async () => JSON.stringify((await listMachines(client)).map((m) => m[0]).sort()) === JSON.stringify(expected),
      { timeoutMs: 60_000, intervalMs: 250, what: 'the machines to match what succeeded' });
    const { records, others } = await readRecordFiles(opts.stateDir);
    expect([...records.keys()].sort()).toEqual(expected);
    expect(others.filter((f) => !/\.tmp-/.test(f))).toEqual([]);
    for (const [name, { record }] of records) {
      // Every path in a stored spec lies inside the image directory.
      const paths = [record.spec.boot?.kernel, record.spec.boot?.initrd, ...(record.spec.disks ?? []).map((d: any) => d.image)].filter(Boolean) as string[];
      for (const p of paths) expect(path.resolve(p).startsWith(`${opts.imageDir}/`) && !p.includes('..'), `${name}: spec path ${p}`).toBe(true);
      const allowed = [JSON.stringify({ fuzz: 'yes' }), ...(annotationsSet.get(name) ?? [])];
      expect(allowed, `annotations of ${name}`).toContain(JSON.stringify(record.annotations));
    }
    expect((await readdir(path.join(opts.stateDir, 'guests')).catch(() => [] as string[])).sort()).toEqual(expected);
    // The agent's own entries only: records, guest files, the event and record journals, and what a
    // fuzzed Drain/Undrain leaves (its shutdown records, the drain state).
    const own = ['machines', 'guests', 'events', 'journal', 'shutdowns', 'drain.json'];
    expect(await readdir(opts.stateDir).then((l) => l.filter((f) => !own.includes(f)))).toEqual([]);

    // Nothing outside the state directory changed or appeared.
    const after = await snapshot(dir, opts.stateDir);
    expect([...after].filter(([p]) => p !== stamp && before.get(p) !== after.get(p))).toEqual([]);
    expect([...before.keys()].filter((p) => !after.has(p))).toEqual([]);
    expect(await strayFiles(stamp)).toEqual([]);

    const sorted = latencies.sort((a, b) => a - b);
    console.log(`fuzz: ${sent} calls in ${seconds.toFixed(1)} s (${localErrors} not marshallable by dbus-next, not sent), ` +
      `p50=${sorted[Math.floor(sorted.length / 2)]!.toFixed(1)} ms p99=${sorted[Math.floor(sorted.length * 0.99)]!.toFixed(1)} ms; ` +
      `${creates} created, ${deletes} deleted, ${expected.length} left`);
    console.log([...byOutcome].sort((a, b) => b[1] - a[1]).map(([k, v]) => `  ${v}\t${k}`).join('\n'));
    if (stalls.length) console.log(`fuzz: ${stalls.length} client connection stalls (reopened; the agent answered a fresh connection each time):\n${stalls.join('\n')}`);
    expect(bad.slice(0, 30)).toEqual([]);
    expect(stalls.length).toBeLessThan(10);
    expect(sent).toBeGreaterThanOrEqual(CALLS);
    expect(creates).toBeGreaterThan(10);
  }, 600_000);
});
