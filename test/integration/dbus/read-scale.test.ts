import type { MessageBus, Variant } from 'dbus-next';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { machineName, writeMachines } from '../../../bench/fixtures.js';
import { rssKiB } from '../../../bench/load-run.js';
import { machineObjectPath } from '../../../src/machine/names.js';
import { busctl } from '../../support/busctl.js';
import { closeClient, listMachines, manager, openClient, rawCall, startRig, type Rig } from '../reliability/helpers.js';

// Reads with 10,000 machines answer from memory (issue 12): ListMachines and GetManagedObjects
// are sent from bytes marshalled once per machine, and must still follow every change. The time
// limits are about ten times the measured figures on a loaded 2-core machine (docs/performance.md,
// "Reads from memory"): they catch a return to building every reply anew, not a slow day.

const COUNT = 10_000;
const MACHINE = 'org.vmkeeper1.Machine';
const SPEC = JSON.stringify({ cpus: 1, memoryMiB: 64, disks: [{ name: 'root', sizeGiB: 1 }], power: 'off' });

type Objects = Record<string, Record<string, Record<string, Variant>>>;

async function managedObjects(client: MessageBus): Promise<Objects> {
  const r = await rawCall(client, { path: '/org/vmkeeper1', iface: 'org.freedesktop.DBus.ObjectManager', member: 'GetManagedObjects' }, 60_000);
  if (!r.ok) throw new Error(`GetManagedObjects: ${r.errorName}: ${r.message}`);
  return r.body[0] as Objects;
}

async function timed(n: number, call: () => Promise<unknown>): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    await call();
    out.push(performance.now() - t0);
  }
  return out.sort((a, b) => a - b);
}

const median = (sorted: number[]) => sorted[Math.floor(sorted.length / 2)]!;

// A dbus-next client alone spends ~1 s decoding GetManagedObjects with 10,000 machines, so that
// call is timed through busctl with the reply not printed, less a busctl GetId (process start
// and connection). Measured: ListMachines ~30-40 ms over dbus-next, GetManagedObjects tens of
// ms through busctl (before: 130-170 ms and ~3 s), GetMachine p99 ~20 ms with 8 writers.
const LIST_LIMIT_MS = 400;
const OBJECTS_LIMIT_MS = 1000;
const GET_P99_LIMIT_MS = 200;
// Acknowledged writes/s of those 8 writers beside the reader: 2,000-2,600 with the built agent
// (bench/scale), 570-740 here (the agent runs from source, a short window); this floor is five
// times under that and catches a write path gone an order of magnitude slower.
const WRITES_FLOOR_PER_SEC = 100;
// Resident memory once the reads and writes are done: 200-230 MiB with the built agent
// (bench/scale, 90 s later), about 300 MiB here (from source, at once); the bound is five times
// the 200 MiB goal and catches a per-machine cost gone up by an order of magnitude.
const RSS_LIMIT_MIB = 1024;

async function busctlCallMs(address: string, args: string[]): Promise<number> {
  const t0 = performance.now();
  const r = await busctl(address, ['--quiet', 'call', ...args], { timeoutMs: 60_000 });
  if (r.code !== 0) throw new Error(`busctl ${args.join(' ')}: ${r.stderr}`);
  return performance.now() - t0;
}

describe(`reads with ${COUNT} machines`, () => {
  let rig: Rig;
  let client: MessageBus;

  beforeAll(async () => {
    rig = await startRig({
      prefix: 'vmk-read-scale-',
      prepare: async (dir) => {
        const { stateDir, imageDir, uri } = await writeMachines(dir, COUNT);
        return { stateDir, imageDir, libvirtUri: uri };
      },
    });
    client = rig.client;
  }, 240_000);

  afterAll(() => rig?.stop());

  it('ListMachines and GetManagedObjects hold every machine and follow changes', async () => {
    const list = await listMachines(client, 60_000);
    expect(list.map(([name]) => name)).toEqual(Array.from({ length: COUNT }, (_, i) => machineName(i)));
    const objects = await managedObjects(client);
    expect(Object.keys(objects)).toHaveLength(COUNT);
    for (const [name, state, power, path] of [list[0]!, list[4242]!, list.at(-1)!]) {
      expect(path).toBe(machineObjectPath(name));
      const props = objects[path]![MACHINE]!;
      expect([props.Name!.value, props.State!.value, props.Power!.value]).toEqual([name, state, power]);
    }

    // A changed machine is sent anew, the others as they were.
    const changed = machineName(4242);
    expect((await manager(client, 'SetMachineAnnotations', 'sa{ss}', [changed, { team: 'blue' }])).ok).toBe(true);
    const after = await managedObjects(client);
    expect(after[machineObjectPath(changed)]![MACHINE]!.Annotations!.value).toEqual({ team: 'blue' });
    expect(after[machineObjectPath(changed)]![MACHINE]!.ResourceVersion!.value).toBeGreaterThan(objects[machineObjectPath(changed)]![MACHINE]!.ResourceVersion!.value as bigint);
    expect(after[machineObjectPath(machineName(4243))]).toEqual(objects[machineObjectPath(machineName(4243))]);

    // A new machine takes its place in name order in both.
    const created = await manager(client, 'CreateMachine', 'ss', ['aaa-first', SPEC]);
    expect(created.ok ? 'ok' : created.message).toBe('ok');
    const listed = await listMachines(client, 60_000);
    expect(listed).toHaveLength(COUNT + 1);
    expect(listed[0]!.slice(0, 3)).toEqual(['aaa-first', expect.any(String), 'off']);
    expect(listed[0]![3]).toBe(machineObjectPath('aaa-first'));
    const withNew = await managedObjects(client);
    expect(withNew[machineObjectPath('aaa-first')]![MACHINE]!.Name!.value).toBe('aaa-first');
    expect(Object.keys(withNew)).toHaveLength(COUNT + 1);
  }, 180_000);

  it('answers ListMachines, GetManagedObjects and GetMachine within ten times the measured figures', async () => {
    await listMachines(client, 60_000); // the first call after a change builds the reply
    const list = await timed(9, () => listMachines(client, 60_000));
    const address = rig.bus.address;
    const setUp = median(await timed(5, () => busctlCallMs(address, ['org.freedesktop.DBus', '/org/freedesktop/DBus', 'org.freedesktop.DBus', 'GetId'])));
    const objects = (await timed(5, () => busctlCallMs(address, ['org.vmkeeper1', '/org/vmkeeper1', 'org.freedesktop.DBus.ObjectManager', 'GetManagedObjects']))).map((ms) => ms - setUp);

    // GetMachine while 8 other connections set annotations without pause: a read never waits
    // for a write's fsync.
    const writers = await Promise.all(Array.from({ length: 8 }, () => openClient(rig.bus.address)));
    let stop = false;
    let writes = 0;
    const loops = writers.map(async (w, k) => {
      for (let i = 0; !stop; i++) {
        const r = await manager(w, 'SetMachineAnnotations', 'sa{ss}', [machineName(k), { n: String(i) }], 30_000);
        if (!r.ok) throw new Error(`${r.errorName}: ${r.message}`);
        writes++;
      }
    });
    let reads: number[];
    let writesPerSec: number;
    try {
      while (writes < 16) await manager(client, 'GetMachine', 's', [machineName(COUNT - 1)]);
      const [w0, t0] = [writes, performance.now()];
      reads = await timed(300, () => manager(client, 'GetMachine', 's', [machineName(Math.floor(Math.random() * COUNT))]));
      writesPerSec = (writes - w0) / ((performance.now() - t0) / 1000);
    } finally {
      stop = true;
      await Promise.all(loops);
      for (const w of writers) closeClient(w);
    }
    const p99 = reads[Math.ceil(reads.length * 0.99) - 1]!;
    console.log(`${COUNT} machines: ListMachines median ${median(list).toFixed(1)} ms, GetManagedObjects (busctl, less GetId) median ${median(objects).toFixed(1)} ms, GetMachine p99 with 8 writers ${p99.toFixed(1)} ms, ${writesPerSec.toFixed(0)} writes/s`);
    expect(median(list)).toBeLessThan(LIST_LIMIT_MS);
    expect(median(objects)).toBeLessThan(OBJECTS_LIMIT_MS);
    expect(p99).toBeLessThan(GET_P99_LIMIT_MS);
    expect(writesPerSec).toBeGreaterThan(WRITES_FLOOR_PER_SEC);
  }, 240_000);

  it('keeps its resident memory within five times the goal after the reads and writes', () => {
    const rssMiB = rssKiB(rig.agent!.child.pid!) / 1024;
    console.log(`${COUNT} machines: agent RSS after the reads and writes ${rssMiB.toFixed(0)} MiB`);
    expect(rssMiB).toBeLessThan(RSS_LIMIT_MIB);
  });
});
