import { readdir } from 'node:fs/promises';
import path from 'node:path';
import type { MessageBus } from 'dbus-next';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawnAgent, type AgentProcess, type AgentProcessOptions } from '../../support/agent-process.js';
import { virsh, type PrivateLibvirtd } from '../../support/libvirtd.js';
import { waitFor } from '../../support/wait.js';
import {
  isRoot, listDir, listEvents, listMachines, machineProp, manager, prng, readRecordFiles, startRig, type Rig,
} from './helpers.js';

// Crash safety: the real agent on a private bus and a private real libvirtd (qemu driver), a
// mixed stream of creates, power changes, annotation changes and deletes from a client, and
// kill -9 at random moments (KILLS, default 50). After every restart the records on disk and on
// the bus are checked against what the client saw acknowledged (creates, deletes, SetMachinePower,
// SetMachineAnnotations); at the end, once the agent has settled, no domain or disk folder may be
// left without a record. One lane at a time acts on a machine, so "acknowledged last" is defined.
//
// Machines are created powered off (a domain is defined, a qcow2 disk created, nothing boots); a
// few are powered on, which runs qemu with an empty disk (SeaBIOS idles, ignores ACPI), so power-off
// and deletion go through the force-stop deadline for real.
//
// Env: VMKEEPER_CRASH_KILLS (default 50), VMKEEPER_CRASH_SEED (default 6).

const KILLS = Number(process.env.VMKEEPER_CRASH_KILLS ?? 50);
const SEED = Number(process.env.VMKEEPER_CRASH_SEED ?? 6);
const MAX_RUNNING = 2;
const MAX_LIVE = 30;

let rig: Rig;
let libvirtd: PrivateLibvirtd;
let client: MessageBus;
let opts: AgentProcessOptions;
let agent: AgentProcess | undefined;

const spec = (grace: number, power: 'on' | 'off' = 'off') =>
  JSON.stringify({ cpus: 1, memoryMiB: 64, domainType: 'qemu', disks: [{ name: 'root', sizeGiB: 1 }], power, gracePeriodSec: grace });

describe.skipIf(!isRoot)('crash safety: kill -9 at random moments', () => {
  beforeAll(async () => {
    rig = await startRig({
      prefix: 'vmk-crash-',
      libvirtd: true,
      config: { callTimeoutSec: 15, pollIntervalMs: 200, sweepIntervalSec: 1, shutdownRetryIntervalSec: 1 },
      startAgent: false, // the test starts (and kills) it, round after round
    });
    ({ opts, client } = rig);
    libvirtd = rig.libvirtd!;
  }, 180_000);

  afterAll(async () => {
    await agent?.stop('SIGKILL');
    await rig?.stop();
  });

  it(`keeps every acknowledged change over ${KILLS} kill -9s and leaves nothing behind`, async () => {
    const random = prng(SEED);
    const pick = <T>(xs: T[]): T => xs[Math.floor(random() * xs.length)]!;
    console.log(`crash-safety: seed=${SEED} kills=${KILLS} (VMKEEPER_CRASH_SEED to replay)`);

    const ackedCreate = new Set<string>();
    const ackedDelete = new Set<string>();
    const deleteSent = new Set<string>(); // a delete cut by a kill may or may not have landed
    const goneAfterDelete = new Set<string>();
    const maybeExists = new Set<string>(); // creates in flight at a kill
    const poweredOn = new Set<string>();
    // Per machine, what a restart may show: the last acknowledged value, plus any sent after it
    // whose reply a kill cut (it may or may not have landed). '' = no "round" annotation.
    const allowedPower = new Map<string, Set<string>>();
    const allowedRound = new Map<string, Set<string>>();
    const busy = new Set<string>(); // machines a lane is calling on right now
    let powerChecks = 0;
    let annotationChecks = 0;
    let serial = 0;
    let opsAcked = 0;
    let opsFailed = 0;
    let killsDuringStartup = 0;
    let tempsLeft = 0;
    let powerOns = 0;
    const unexpected: string[] = [];
    const restartMs: number[] = [];

    const live = () => [...new Set([...ackedCreate, ...maybeExists])].filter((n) => !ackedDelete.has(n) && !goneAfterDelete.has(n));

    async function restart(): Promise<void> {
      const t0 = performance.now();
      agent = spawnAgent(opts);
      await agent.ready(60_000);
      restartMs.push(performance.now() - t0);
    }

    /** Invariants right after a restart, before any new call. */
    async function checkAfterRestart(before: Map<string, Record<string, any>>, tempsBefore: string[]): Promise<void> {
      const { records, others } = await readRecordFiles(opts.stateDir);
      // Temp files of writes cut by the kill are removed by load() (new ones may be in flight now).
      expect(others.filter((f) => tempsBefore.includes(f)), 'temp files survive load()').toEqual([]);
      tempsLeft += tempsBefore.length;
      expect(await listDir(path.join(opts.stateDir, 'quarantine')), 'a record was torn and quarantined').toEqual([]);
      const listed = new Map((await listMachines(client)).map((m) => [m[0], m]));
      for (const n of ackedCreate) {
        if (deleteSent.has(n)) continue;
        expect(listed.has(n), `acknowledged create ${n} lost`).toBe(true);
      }
      for (const n of goneAfterDelete) {
        expect(listed.has(n), `deleted ${n} came back`).toBe(false);
        expect(records.has(n), `deleted ${n} has a record file again`).toBe(false);
      }
      for (const n of ackedDelete) {
        const r = records.get(n)?.record ?? before.get(n);
        if (listed.has(n) && r) expect(r.deletionTimestamp, `acknowledged delete of ${n} not persisted`).toBeGreaterThan(0);
      }
      // Deadlines persisted before the kill must not move: same value, 0 (done) or the machine gone.
      for (const [n, r] of before) {
        const was = Number(r.status?.forceStopAt ?? 0);
        if (was <= 0 || !listed.has(n)) continue;
        const now = Number((await machineProp(client, n, 'ForceStopAt').catch(() => 0n)) as bigint) / 1000;
        if (now !== 0 && now !== was) throw new Error(`${n}: ForceStopAt moved from ${was} to ${now} over a restart`);
        const del = Number(r.deletionTimestamp ?? 0);
        if (del > 0 && listed.has(n)) {
          const again = Number((await machineProp(client, n, 'DeletionTimestamp').catch(() => 0n)) as bigint) / 1000;
          if (again !== 0) expect(again, `${n}: DeletionTimestamp moved`).toBe(del);
        }
      }
      for (const [n, [, , power]] of listed) {
        if (deleteSent.has(n)) continue;
        const round = ((await machineProp(client, n, 'Annotations')) as Record<string, string>).round ?? '';
        const powers = allowedPower.get(n);
        const rounds = allowedRound.get(n);
        if (powers) expect([...powers], `${n}: acknowledged SetMachinePower lost over a restart (Power is ${power})`).toContain(power);
        if (rounds) expect([...rounds], `${n}: acknowledged SetMachineAnnotations lost over a restart (round is "${round}")`).toContain(round);
        powerChecks += powers ? 1 : 0;
        annotationChecks += rounds ? 1 : 0;
        allowedPower.set(n, new Set([power]));
        allowedRound.set(n, new Set([round]));
      }
      for (const n of deleteSent) if (!listed.has(n)) goneAfterDelete.add(n);
      for (const n of [...maybeExists]) {
        if (listed.has(n)) continue;
        maybeExists.delete(n); // an unacknowledged create that did not make it: fine
      }
      for (const n of [...poweredOn]) if (!listed.has(n) || listed.get(n)![2] !== 'on') poweredOn.delete(n);
    }

    /** Notes a call that changes one value: acknowledged, it is the only one allowed; cut, one more. */
    function track(allowed: Map<string, Set<string>>, name: string, value: string, ok: boolean): void {
      if (ok) allowed.set(name, new Set([value]));
      else allowed.get(name)?.add(value);
    }

    async function oneOp(): Promise<void> {
      const names = live();
      const free = names.filter((n) => !busy.has(n));
      const r = random();
      if (names.length < 3 || free.length === 0 || (r < 0.4 && names.length < MAX_LIVE)) {
        const name = `c${SEED}-${serial++}`;
        maybeExists.add(name);
        const res = await manager(client, 'CreateMachine', 'ss', [name, spec(pick([0, 1, 2, 3]))], 20_000);
        if (res.ok) {
          ackedCreate.add(name);
          maybeExists.delete(name);
          allowedPower.set(name, new Set(['off']));
          allowedRound.set(name, new Set(['']));
          opsAcked++;
        } else noteFailure('CreateMachine', res.errorName, res.message);
        return;
      }
      const name = pick(free);
      busy.add(name);
      try {
        await opOn(name, r);
      } finally {
        busy.delete(name);
      }
    }

    async function opOn(name: string, r: number): Promise<void> {
      if (r < 0.5 && poweredOn.size < MAX_RUNNING) {
        const res = await manager(client, 'SetMachinePower', 'ss', [name, 'on'], 20_000);
        track(allowedPower, name, 'on', res.ok);
        if (res.ok) {
          poweredOn.add(name);
          powerOns++;
          opsAcked++;
        } else noteFailure('SetMachinePower', res.errorName, res.message);
      } else if (r < 0.62) {
        const res = await manager(client, 'SetMachinePower', 'ss', [name, 'off'], 20_000);
        track(allowedPower, name, 'off', res.ok);
        if (res.ok) {
          poweredOn.delete(name);
          opsAcked++;
        } else noteFailure('SetMachinePower', res.errorName, res.message);
      } else if (r < 0.72) {
        const round = String(serial++);
        const res = await manager(client, 'SetMachineAnnotations', 'sa{ss}', [name, { round }], 20_000);
        track(allowedRound, name, round, res.ok);
        if (res.ok) opsAcked++;
        else noteFailure('SetMachineAnnotations', res.errorName, res.message);
      } else {
        deleteSent.add(name);
        const res = random() < 0.5
          ? await manager(client, 'DeleteMachine', 's', [name], 20_000)
          : await manager(client, 'DeleteMachineWithGracePeriod', 'su', [name, pick([0, 1, 2])], 20_000);
        if (res.ok) {
          ackedDelete.add(name);
          poweredOn.delete(name);
          opsAcked++;
        } else noteFailure('Delete', res.errorName, res.message);
      }
    }

    function noteFailure(what: string, errorName: string, message: string): void {
      opsFailed++;
      // Expected: the agent died under the call (NoReply/Timeout/ServiceUnknown), or a race we made
      // ourselves (the machine is already being deleted, or an in-flight create never landed).
      const expected = ['org.freedesktop.DBus.Error.NoReply', 'org.freedesktop.DBus.Error.ServiceUnknown', 'Timeout',
        'org.vmkeeper1.Error.MachineTerminating', 'org.vmkeeper1.Error.NoSuchMachine'];
      if (!expected.includes(errorName)) unexpected.push(`${what}: ${errorName}: ${message}`);
    }

    for (let round = 0; round < KILLS; round++) {
      const { records: before, others: tempsBefore } = await readRecordFiles(opts.stateDir);
      const beforeRecords = new Map([...before].map(([n, f]) => [n, f.record]));
      if (round > 0 && random() < 0.1) {
        // Now and then kill it while it is still starting (loading records, connecting, reconciling).
        agent = spawnAgent(opts);
        await new Promise((r) => setTimeout(r, 100 + random() * 900));
        await agent.stop('SIGKILL');
        killsDuringStartup++;
        continue;
      }
      await restart();
      await checkAfterRestart(beforeRecords, tempsBefore);
      // A burst of concurrent operations, then kill -9 at a random moment inside it.
      const until = performance.now() + 150 + random() * 1500;
      const lanes = Array.from({ length: 3 }, async () => {
        while (performance.now() < until) await oneOp();
      });
      await new Promise((r) => setTimeout(r, Math.max(0, until - performance.now())));
      await agent!.stop('SIGKILL');
      await Promise.all(lanes);
    }

    // Let it settle: every acknowledged deletion completes, every other machine reaches a steady state.
    const last = await readRecordFiles(opts.stateDir);
    await restart();
    await checkAfterRestart(new Map([...last.records].map(([n, f]) => [n, f.record])), last.others);
    await waitFor(
      async () => {
        const listed = await listMachines(client);
        return listed.every((m) => !ackedDelete.has(m[0]) && ['stopped', 'running'].includes(m[1]));
      },
      { timeoutMs: 120_000, intervalMs: 500, what: 'every deletion to finish and every machine to settle' },
    );
    const listed = new Set((await listMachines(client)).map((m) => m[0]));
    const { records } = await readRecordFiles(opts.stateDir);
    expect([...records.keys()].sort()).toEqual([...listed].sort());
    const domains = (await virsh(libvirtd.uri, ['list', '--all', '--name'])).stdout.split('\n').map((s) => s.trim()).filter((s) => s.startsWith('vmkeeper-'));
    const events = await listEvents(client);
    const orphanReported = new Set(events.filter((e) => e[3] === 'OrphanDomain').map((e) => e[1]));
    for (const d of domains) {
      const name = d.slice('vmkeeper-'.length);
      if (!listed.has(name)) expect(orphanReported.has(name), `domain ${d} has no record and was not reported`).toBe(true);
    }
    for (const n of listed) expect(domains, `machine ${n} has no domain after settling`).toContain(`vmkeeper-${n}`);
    const guestDirs = await readdir(path.join(opts.stateDir, 'guests')).catch(() => [] as string[]);
    expect(guestDirs.filter((g) => !listed.has(g)), 'disk folders without a record').toEqual([]);
    for (const n of ackedCreate) if (!deleteSent.has(n)) expect(listed.has(n), `acknowledged ${n} lost`).toBe(true);
    for (const n of ackedDelete) expect(listed.has(n), `deleted ${n} still there`).toBe(false);

    restartMs.sort((a, b) => a - b);
    console.log(
      `crash-safety: ${KILLS} kills (${killsDuringStartup} during start-up), ${opsAcked} acknowledged ops, ${opsFailed} failed at a kill, ` +
        `${tempsLeft} torn temp files cleaned at load, ` +
        `${ackedCreate.size} creates, ${powerOns} power-ons, ${ackedDelete.size} deletes, ${listed.size} machines at the end, ` +
        `${powerChecks} Power and ${annotationChecks} Annotations checks after restarts, ` +
        `restart to answering p50=${restartMs[Math.floor(restartMs.length / 2)]!.toFixed(0)} ms max=${restartMs.at(-1)!.toFixed(0)} ms`,
    );
    expect(unexpected).toEqual([]);
    expect(ackedCreate.size).toBeGreaterThan(KILLS / 2);
    expect(ackedDelete.size).toBeGreaterThan(5);
    expect(powerChecks, 'restarts checked acknowledged power changes').toBeGreaterThan(KILLS / 2);
  }, 900_000);
});
