import { execFile } from 'node:child_process';
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MANAGER_PATH as MANAGER, machineObjectPath as machinePath } from '../../../src/machine/names.js';
import { busctlCall, dbusSend, ensureUserInGroup, NOBODY, run, type RunAs } from '../../support/busctl.js';
import { POLICY_FILE, PROJECT_ROOT, startSystemBus } from '../../support/dbus-daemon.js';
import { POLKIT_BUS_POLICY, polkitdUnavailable, startPolkitd, type PrivatePolkitd } from '../../support/polkitd.js';
import { waitFor } from '../../support/wait.js';
import { startRig, type Rig } from '../reliability/helpers.js';

// The real polkitd on a system-like bus, with the shipped .policy and rule: polkit decides each
// mutating action for a caller the bus lets through, and the bus policy alone guards the calls
// when polkit goes away in "auto".

const M = 'org.vmkeeper1.Manager';
const MACHINE = 'org.vmkeeper1.Machine';
const DENIED = 'org.freedesktop.DBus.Error.AccessDenied';
const SPEC = JSON.stringify({ cpus: 1, memoryMiB: 64, disks: [{ name: 'root', sizeGiB: 1 }], power: 'off' });
const ACTIONS_FILE = path.join(PROJECT_ROOT, 'config/org.vmkeeper1.policy');
const RULES_FILE = path.join(PROJECT_ROOT, 'config/50-org.vmkeeper1.rules');
const NOBODY_UID = '65534';

// What an operator adds (docs/operations.md) so that polkit, not group vmkeeper, decides who may change machines.
const OPEN_BUS_POLICY = `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-BUS Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <policy context="default">
    <allow send_destination="org.vmkeeper1" send_interface="org.vmkeeper1.Manager"/>
    <allow send_destination="org.vmkeeper1" send_interface="org.vmkeeper1.Machine"/>
  </policy>
</busconfig>
`;

interface Mutation {
  action: string;
  path: (name: string) => string;
  member: string;
  args: (name: string) => string[];
}

const MUTATIONS: Mutation[] = [
  { action: 'org.vmkeeper1.create-machine', path: () => MANAGER, member: `${M}.CreateMachine`, args: (n) => [`string:${n}-new`, `string:${SPEC}`] },
  { action: 'org.vmkeeper1.delete-machine', path: () => MANAGER, member: `${M}.DeleteMachine`, args: (n) => [`string:${n}`] },
  { action: 'org.vmkeeper1.delete-machine', path: () => MANAGER, member: `${M}.DeleteMachineIfVersion`, args: (n) => [`string:${n}`, 'uint64:0'] },
  { action: 'org.vmkeeper1.delete-machine', path: machinePath, member: `${MACHINE}.DeleteWithGracePeriod`, args: () => ['uint32:0'] },
  { action: 'org.vmkeeper1.set-power', path: () => MANAGER, member: `${M}.SetMachinePower`, args: (n) => [`string:${n}`, 'string:on'] },
  { action: 'org.vmkeeper1.set-power', path: machinePath, member: `${MACHINE}.SetPower`, args: () => ['string:on'] },
  { action: 'org.vmkeeper1.set-annotations', path: () => MANAGER, member: `${M}.SetMachineAnnotations`, args: (n) => [`string:${n}`, 'dict:string:string:owner,intruder'] },
  { action: 'org.vmkeeper1.set-annotations', path: () => MANAGER, member: `${M}.SetMachineAnnotationsIfVersion`, args: (n) => [`string:${n}`, 'dict:string:string:owner,intruder', 'uint64:0'] },
  { action: 'org.vmkeeper1.drain', path: () => MANAGER, member: `${M}.Drain`, args: () => [] },
  { action: 'org.vmkeeper1.drain', path: () => MANAGER, member: `${M}.Undrain`, args: () => [] },
];

type EventRow = [number, number, string, string, string, string, string, string];

const unavailable = polkitdUnavailable();
/** Shown in the suite's name when it is skipped, so the report says why. */
const skipped = unavailable ? ` (skipped: ${unavailable})` : '';

async function openBusPolicyFile(dir: string): Promise<string> {
  // A local file (/etc/dbus-1/system.d) is read after the packaged ones, so its allows win.
  const file = path.join(dir, 'org.vmkeeper1-local.conf');
  await writeFile(file, OPEN_BUS_POLICY);
  return file;
}

describe.skipIf(unavailable !== undefined)(`polkit decides each mutating action (real polkitd)${skipped}`, () => {
  let rig: Rig;
  let polkitd: PrivatePolkitd;
  let files: string;
  let member: RunAs;
  const send = (c: Mutation, name: string, as?: RunAs) => dbusSend(rig.bus.address, c.path(name), c.member, c.args(name), { as });
  const manager = (member: string, args: string[], as?: RunAs) => dbusSend(rig.bus.address, MANAGER, `${M}.${member}`, args, { as });
  // The reply without dbus-send's header line (its time and serials change).
  const describeMachine = async (name: string) => (await manager('DescribeMachine', [`string:${name}`])).stdout.split('\n').slice(1).join('\n');
  const create = async (name: string, as?: RunAs) => {
    const r = await manager('CreateMachine', [`string:${name}`, `string:${SPEC}`], as);
    if (!r.ok) throw new Error(`${r.errorName}: ${r.message}`);
  };
  const events = async (name: string) => {
    const out = await busctlCall(rig.bus.address, MANAGER, M, 'ListEventsSince', 'ts', [0, name]);
    return (out.data as [EventRow[], number])[0];
  };

  beforeAll(async () => {
    member = await ensureUserInGroup('vmkeeper-test', 'vmkeeper');
    files = await mkdtemp(path.join(os.tmpdir(), 'vmk-polkit-files-'));
    const open = await openBusPolicyFile(files);
    rig = await startRig({
      prefix: 'vmk-polkit-',
      startBus: () => startSystemBus({ policyFiles: [POLICY_FILE, POLKIT_BUS_POLICY], localPolicyFiles: [open] }),
      config: { authorization: 'polkit' },
      prepare: (dir) => chmod(dir, 0o755),
    });
    polkitd = await startPolkitd({ busAddress: rig.bus.address, dir: path.join(files, 'polkitd'), actionFiles: [ACTIONS_FILE], ruleFiles: [RULES_FILE] });
  }, 90_000);

  afterAll(async () => {
    await polkitd?.stop();
    await rig?.stop();
    if (files) await rm(files, { recursive: true, force: true });
  });

  it('polkitd registered the shipped actions with their defaults', async () => {
    for (const action of new Set(MUTATIONS.map((c) => c.action))) {
      const { stdout } = await promisify(execFile)('pkaction', ['--action-id', action, '--verbose'], { env: { ...process.env, DBUS_SYSTEM_BUS_ADDRESS: rig.bus.address } });
      expect(stdout, action).toMatch(/implicit any:\s+no\n/);
      expect(stdout, action).toMatch(/implicit inactive:\s+no\n/);
      expect(stdout, action).toMatch(/implicit active:\s+auth_admin\n/);
    }
  });

  it('root and a member of group vmkeeper are allowed by the shipped rule', async () => {
    await create('by-root');
    await create('by-member', member);
    expect((await manager('SetMachineAnnotations', ['string:by-member', 'dict:string:string:owner,ops'], member)).ok).toBe(true);
    expect((await manager('SetMachinePower', ['string:by-member', 'string:on'], member)).ok).toBe(true);
    expect((await manager('DeleteMachine', ['string:by-root'], member)).ok).toBe(true);
    expect((await manager('Drain', [], member)).ok).toBe(true);
    expect((await manager('Undrain', [], member)).ok).toBe(true);
  });

  it('an outsider (nobody) is refused each mutating action by name, may read, and changes nothing', async () => {
    await create('target');
    await waitFor(async () => (await describeMachine('target')).includes('"state":"stopped"'), { timeoutMs: 30_000, what: 'target settled' });
    const before = await describeMachine('target');
    for (const c of MUTATIONS) {
      const out = await send(c, 'target', NOBODY);
      expect(out.errorName, c.member).toBe(DENIED);
      // The agent's answer (polkit said no), not the bus's: it names the action.
      expect(out.message, c.member).toContain(`not authorized for ${c.action}`);
    }
    expect(await describeMachine('target')).toBe(before);
    expect((await manager('GetMachine', ['string:target-new'])).errorName).toBe('org.vmkeeper1.Error.NoSuchMachine');
    // vmkeeperctl passes polkit's reason on, naming the action, rather than the group hint it gives for the bus's refusal.
    const ctl = await run(process.execPath, ['--import', 'tsx', path.join(PROJECT_ROOT, 'src/ctl/main.ts'), '--bus', rig.bus.address, 'annotate', 'target', 'owner=intruder'], { as: NOBODY, timeoutMs: 60_000 });
    expect(ctl.code).toBe(5);
    expect(ctl.stderr).toBe('vmkeeperctl: access denied by polkit: not authorized for org.vmkeeper1.set-annotations\n');
    for (const read of ['ListMachines', 'ListEvents', 'ListShutdownRecords']) expect((await manager(read, [], NOBODY)).ok, read).toBe(true);
    expect((await manager('DescribeMachine', ['string:target'], NOBODY)).ok).toBe(true);
  }, 90_000);

  it('a rule added at runtime grants the outsider set-power only, and the event names that user', async () => {
    await create('granted');
    await polkitd.addAdminRule(
      '40-nobody-may-set-power.rules',
      'polkit.addRule(function (action, subject) {\n' +
        '  if (action.id === "org.vmkeeper1.set-power" && subject.user === "nobody") return polkit.Result.YES;\n' +
        '});\n',
    );
    // polkitd rereads rules.d when it changes; until then the call is still refused.
    await waitFor(async () => (await manager('SetMachinePower', ['string:granted', 'string:on'], NOBODY)).ok, {
      timeoutMs: 30_000,
      intervalMs: 200,
      what: 'polkitd to load the new rule and grant set-power',
    });
    const annotate = await manager('SetMachineAnnotations', ['string:granted', 'dict:string:string:owner,nobody'], NOBODY);
    expect(annotate.errorName).toBe(DENIED);
    expect(annotate.message).toContain('org.vmkeeper1.set-annotations');
    const byCall = await waitFor(async () => (await events('granted')).find((e) => e[7] === 'SetMachinePower'), { timeoutMs: 20_000, what: 'the SetMachinePower event' });
    expect(byCall[6]).toBe(NOBODY_UID);
    expect((await events('granted')).some((e) => e[7] === 'SetMachineAnnotations')).toBe(false);
  }, 90_000);
});

describe.skipIf(unavailable !== undefined)(`"auto" with polkitd stopped: the bus policy alone still holds${skipped}`, () => {
  let rig: Rig;
  let polkitd: PrivatePolkitd | undefined;
  let files: string;
  let member: RunAs;
  const annotate = (name: string, value: string, as?: RunAs) =>
    dbusSend(rig.bus.address, MANAGER, `${M}.SetMachineAnnotations`, [`string:${name}`, `dict:string:string:owner,${value}`], { as });

  beforeAll(async () => {
    member = await ensureUserInGroup('vmkeeper-test', 'vmkeeper');
    files = await mkdtemp(path.join(os.tmpdir(), 'vmk-polkit-auto-'));
    rig = await startRig({
      prefix: 'vmk-polkit-auto-',
      startBus: () => startSystemBus({ policyFiles: [POLICY_FILE, POLKIT_BUS_POLICY] }),
      config: { authorization: 'auto' },
      prepare: (dir) => chmod(dir, 0o755),
    });
    polkitd = await startPolkitd({ busAddress: rig.bus.address, dir: path.join(files, 'polkitd'), actionFiles: [ACTIONS_FILE], ruleFiles: [RULES_FILE] });
    const r = await dbusSend(rig.bus.address, MANAGER, `${M}.CreateMachine`, ['string:kept', `string:${SPEC}`]);
    if (!r.ok) throw new Error(`${r.errorName}: ${r.message}`);
  }, 90_000);

  afterAll(async () => {
    await polkitd?.stop();
    await rig?.stop();
    if (files) await rm(files, { recursive: true, force: true });
  });

  it('polkit is asked while it runs; once stopped, the bus policy alone decides: members pass, outsiders do not', async () => {
    expect((await annotate('kept', 'with-polkit', member)).ok).toBe(true);
    expect((await annotate('kept', 'intruder', NOBODY)).errorName).toBe(DENIED);
    // Proof that "auto" asks polkit while it is there: a rule refusing the member is obeyed.
    await polkitd!.addAdminRule(
      '40-member-may-not-annotate.rules',
      'polkit.addRule(function (action, subject) {\n' +
        '  if (action.id === "org.vmkeeper1.set-annotations" && subject.user === "vmkeeper-test") return polkit.Result.NO;\n' +
        '});\n',
    );
    const refused = await waitFor(async () => {
      const r = await annotate('kept', 'refused', member);
      return r.ok ? undefined : r;
    }, { timeoutMs: 30_000, intervalMs: 200, what: 'polkitd to load the refusing rule' });
    expect(refused.errorName).toBe(DENIED);
    expect(refused.message).toContain('not authorized for org.vmkeeper1.set-annotations');
    await polkitd!.stop();
    polkitd = undefined;
    await waitFor(async () => (await run('busctl', [`--address=${rig.bus.address}`, 'status', 'org.freedesktop.PolicyKit1'])).code !== 0, {
      timeoutMs: 10_000,
      what: 'polkit gone from the bus',
    });
    const afterStop = await annotate('kept', 'without-polkit', member);
    expect(afterStop.ok ? 'ok' : `${afterStop.errorName}: ${afterStop.message}`).toBe('ok');
    expect((await annotate('kept', 'root', undefined)).ok).toBe(true);
    const outsider = await annotate('kept', 'intruder', NOBODY);
    expect(outsider.errorName).toBe(DENIED);
    expect(outsider.message).not.toContain('not authorized for'); // the bus refused it, the agent never saw it
    const described = (await dbusSend(rig.bus.address, MANAGER, `${M}.DescribeMachine`, ['string:kept'])).stdout;
    expect(described).toContain('root');
    expect(described).not.toContain('intruder');
  }, 90_000);
});
