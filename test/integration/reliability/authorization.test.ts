import { chmod } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MANAGER_PATH as MANAGER, machineObjectPath as machinePath } from '../../../src/machine/names.js';
import { dbusSend, ensureUserInGroup, NOBODY, type RunAs } from '../../support/busctl.js';
import { startSystemBus, type PrivateBus } from '../../support/dbus-daemon.js';
import { waitFor } from '../../support/wait.js';
import { isRoot, startRig, type Rig } from './helpers.js';

// Authorization with the packaged policy (config/org.vmkeeper1.conf) on a system-like bus, against
// the real agent: `nobody` (outside group vmkeeper) may read everything and change nothing; a
// member of vmkeeper may call every method. Every mutating method of both interfaces is listed.

const M = 'org.vmkeeper1.Manager';
const MACHINE = 'org.vmkeeper1.Machine';
const PROPS = 'org.freedesktop.DBus.Properties';
const SPEC = JSON.stringify({ cpus: 1, memoryMiB: 64, disks: [{ name: 'root', sizeGiB: 1 }], power: 'off' });

interface Case {
  path: (name: string) => string;
  member: string;
  args: (name: string) => string[];
}

// Every method that changes state, on both interfaces (and Properties.Set, read-only anyway).
const MUTATING: Case[] = [
  { path: () => MANAGER, member: `${M}.CreateMachine`, args: (n) => [`string:${n}-new`, `string:${SPEC}`] },
  { path: () => MANAGER, member: `${M}.SetMachineAnnotations`, args: (n) => [`string:${n}`, 'dict:string:string:owner,intruder'] },
  { path: () => MANAGER, member: `${M}.SetMachinePower`, args: (n) => [`string:${n}`, 'string:on'] },
  { path: () => MANAGER, member: `${M}.DeleteMachineWithGracePeriod`, args: (n) => [`string:${n}`, 'uint32:0'] },
  { path: () => MANAGER, member: `${M}.DeleteMachine`, args: (n) => [`string:${n}`] },
  { path: () => MANAGER, member: `${M}.SetMachineAnnotationsIfVersion`, args: (n) => [`string:${n}`, 'dict:string:string:owner,intruder', 'uint64:0'] },
  { path: () => MANAGER, member: `${M}.SetMachinePowerIfVersion`, args: (n) => [`string:${n}`, 'string:on', 'uint64:0'] },
  { path: () => MANAGER, member: `${M}.DeleteMachineIfVersion`, args: (n) => [`string:${n}`, 'uint64:0'] },
  { path: machinePath, member: `${MACHINE}.SetPower`, args: () => ['string:on'] },
  { path: machinePath, member: `${MACHINE}.DeleteWithGracePeriod`, args: () => ['uint32:0'] },
  { path: machinePath, member: `${MACHINE}.Delete`, args: () => [] },
  { path: machinePath, member: `${PROPS}.Set`, args: () => [`string:${MACHINE}`, 'string:Power', 'variant:string:on'] },
  // Last: a drain stops every machine, and the undrain after it lets them start again.
  { path: () => MANAGER, member: `${M}.Drain`, args: () => [] },
  { path: () => MANAGER, member: `${M}.Undrain`, args: () => [] },
];

const READS: Case[] = [
  { path: () => MANAGER, member: `${M}.ListMachines`, args: () => [] },
  { path: () => MANAGER, member: `${M}.GetMachine`, args: (n) => [`string:${n}`] },
  { path: () => MANAGER, member: `${M}.DescribeMachine`, args: (n) => [`string:${n}`] },
  { path: () => MANAGER, member: `${M}.ListEvents`, args: () => [] },
  { path: () => MANAGER, member: `${M}.ListEventsSince`, args: () => ['uint64:0', 'string:'] },
  { path: () => MANAGER, member: `${M}.DescribeMachineStructured`, args: (n) => [`string:${n}`] },
  { path: () => MANAGER, member: `${M}.ListShutdownRecords`, args: () => [] },
  { path: () => MANAGER, member: 'org.freedesktop.DBus.ObjectManager.GetManagedObjects', args: () => [] },
  { path: () => MANAGER, member: `${PROPS}.GetAll`, args: () => [`string:${M}`] },
  { path: () => MANAGER, member: `${PROPS}.Get`, args: () => [`string:${M}`, 'string:State'] },
  { path: () => MANAGER, member: 'org.freedesktop.DBus.Introspectable.Introspect', args: () => [] },
  { path: machinePath, member: `${MACHINE}.Describe`, args: () => [] },
  { path: machinePath, member: `${MACHINE}.DescribeStructured`, args: () => [] },
  { path: machinePath, member: `${PROPS}.GetAll`, args: () => [`string:${MACHINE}`] },
  { path: machinePath, member: `${PROPS}.Get`, args: () => [`string:${MACHINE}`, 'string:State'] },
  { path: machinePath, member: 'org.freedesktop.DBus.Introspectable.Introspect', args: () => [] },
  { path: machinePath, member: 'org.freedesktop.DBus.Peer.Ping', args: () => [] },
];

describe.skipIf(!isRoot)('authorization with the packaged bus policy', () => {
  let rig: Rig;
  let bus: PrivateBus;
  let member: RunAs;
  const call = (c: Case, name: string, as?: RunAs) => dbusSend(bus.address, c.path(name), c.member, c.args(name), { as });
  const create = async (name: string) => {
    const r = await dbusSend(bus.address, MANAGER, `${M}.CreateMachine`, [`string:${name}`, `string:${SPEC}`]);
    if (!r.ok) throw new Error(`${r.errorName}: ${r.message}`);
  };

  beforeAll(async () => {
    member = await ensureUserInGroup('vmkeeper-test', 'vmkeeper');
    rig = await startRig({ prefix: 'vmk-authz-', startBus: () => startSystemBus(), prepare: (dir) => chmod(dir, 0o755) });
    bus = rig.bus;
  }, 60_000);

  afterAll(() => rig?.stop());

  it('nobody may read everything', async () => {
    const r = await dbusSend(bus.address, MANAGER, `${M}.CreateMachine`, ['string:readable', `string:${SPEC}`]);
    expect(r.ok).toBe(true);
    for (const c of READS) {
      const out = await call(c, 'readable', NOBODY);
      expect(out.ok ? 'ok' : `${out.errorName}: ${out.message}`, c.member).toBe('ok');
    }
  });

  it('nobody gets AccessDenied from every mutating method, and nothing changes', async () => {
    const target = 'target';
    await create(target); // CreateMachine's probe creates `target-new`
    const describe = async () => (await dbusSend(bus.address, MANAGER, `${M}.DescribeMachine`, [`string:${target}`])).stdout.split('\n').slice(1).join('\n');
    await waitFor(async () => (await describe()).includes('"state":"stopped"'), { timeoutMs: 20_000, what: 'target settled' });
    const before = await describe();
    for (const c of MUTATING) {
      const out = await call(c, target, NOBODY);
      expect(out.errorName, c.member).toBe('org.freedesktop.DBus.Error.AccessDenied');
    }
    expect(await describe()).toBe(before);
    expect((await dbusSend(bus.address, MANAGER, `${M}.GetMachine`, [`string:${target}-new`])).errorName).toBe('org.vmkeeper1.Error.NoSuchMachine');
  });

  it('a member of group vmkeeper may call every mutating method', async () => {
    // One machine per method, so each call acts on a machine in a state that accepts it.
    for (const [i, c] of MUTATING.entries()) {
      const name = `m${i}`;
      if (c.member !== `${M}.CreateMachine`) await create(name);
      const out = await call(c, name, member);
      if (c.member === `${PROPS}.Set`) {
        // Allowed by the policy; the agent itself refuses because every property is read-only.
        expect(out.errorName, c.member).toBe('org.freedesktop.DBus.Error.PropertyReadOnly');
      } else {
        expect(out.ok ? 'ok' : `${out.errorName}: ${out.message}`, c.member).toBe('ok');
      }
    }
    expect((await dbusSend(bus.address, MANAGER, `${M}.GetMachine`, ['string:m0-new'], { as: member })).ok).toBe(true);
  });
});
