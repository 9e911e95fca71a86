import { chmod } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { plainSocketAddress } from '../../../src/dbus/bus-address.js';
import { MANAGER_PATH, machineObjectPath } from '../../../src/machine/names.js';
import { dbusSend, NOBODY, run } from '../../support/busctl.js';
import { startSystemBus } from '../../support/dbus-daemon.js';
import { isRoot, manager, rawCall, startRig, type CallResult, type Rig } from '../reliability/helpers.js';

// Hostile input on the bus, against the real agent on a system-like bus with the packaged policy:
// annotations and spec strings that once silenced GetManagedObjects or broke sd-bus/GLib clients,
// and a flood of huge mis-typed calls from an unprivileged user. Each must get a named error while
// other clients keep being answered and the agent stays up.

const M = 'org.vmkeeper1.Manager';
const FLOOD_SENDER = path.join(path.dirname(fileURLToPath(import.meta.url)), 'flood-sender.mjs');
const SPEC = { cpus: 1, memoryMiB: 64, disks: [{ name: 'root', sizeGiB: 1 }], power: 'off' };
// JSON escapes reach the agent as the characters themselves (the bus would refuse a raw NUL).
const specWith = (extra: string) => `{"cpus":1,"memoryMiB":64,"disks":[{"name":"root","sizeGiB":1}],"power":"off",${extra}}`;

// 10 x 12 MiB stays under the bus's own queue for one destination (max_outgoing_bytes, 127 MiB on
// a system bus): beyond it dbus-daemon itself answers every caller LimitsExceeded until the agent
// has drained the queue (docs/dbus-api.md, Limits). Decoded, each body would be 3 million numbers.
const FLOOD_SENDERS = 10;
const FLOOD_CALLS_EACH = 1;
const FLOOD_BODY_BYTES = 12 * 1024 * 1024;

describe.skipIf(!isRoot)('hostile D-Bus input', () => {
  let rig: Rig;
  const getMachine = (name: string): Promise<CallResult> => manager(rig.client, 'GetMachine', 's', [name], 10_000);
  const managedObjects = () => rawCall(rig.client, { path: MANAGER_PATH, iface: 'org.freedesktop.DBus.ObjectManager', member: 'GetManagedObjects' }, 10_000);

  beforeAll(async () => {
    rig = await startRig({ prefix: 'vmk-dbus-input-', startBus: () => startSystemBus(), prepare: (dir) => chmod(dir, 0o755) });
    const created = await manager(rig.client, 'CreateMachine', 'ss', ['good', JSON.stringify({ ...SPEC, annotations: { owner: 'team-a' } })]);
    expect(created.ok).toBe(true);
  }, 60_000);

  afterAll(() => rig?.stop());

  it.each([
    ['key "constructor"', specWith('"annotations":{"constructor":"x"}')],
    ['key "__proto__"', specWith('"annotations":{"__proto__":"x"}')],
    ['key "toString"', specWith('"annotations":{"toString":"x"}')],
    ['a NUL in a value', specWith('"annotations":{"a":"x\\u0000y"}')],
    ['U+FFFE in a value', specWith('"annotations":{"a":"\\ufffe"}')],
    ['U+FFFF in a value', specWith('"annotations":{"a":"\\uffff"}')],
    ['a lone surrogate in a value', specWith('"annotations":{"a":"\\ud800"}')],
    ['U+FFFE in the kernel command line', specWith(`"boot":{"kernel":"/nowhere/k","cmdline":"\\ufffe"}`)],
  ])('CreateMachine with annotations or spec strings holding %s: InvalidSpec, nothing created', async (_, spec) => {
    const r = await manager(rig.client, 'CreateMachine', 'ss', ['hostile', spec]);
    expect(r.ok ? 'ok' : r.errorName).toBe('org.vmkeeper1.Error.InvalidSpec');
    expect((await getMachine('hostile')).ok).toBe(false);
  });

  it('SetMachineAnnotations with key "constructor": InvalidSpec, annotations unchanged, GetManagedObjects still answers', async () => {
    const r = await dbusSend(rig.bus.address, MANAGER_PATH, `${M}.SetMachineAnnotations`, ['string:good', 'dict:string:string:constructor,x']);
    expect(r.errorName).toBe('org.vmkeeper1.Error.InvalidSpec');
    const objects = await managedObjects();
    if (!objects.ok) throw new Error(`GetManagedObjects: ${objects.errorName}: ${objects.message}`);
    const good = (objects.body[0] as Record<string, Record<string, Record<string, { value: unknown }>>>)[machineObjectPath('good')]!;
    expect(good[`org.vmkeeper1.Machine`]!.Annotations!.value).toEqual({ owner: 'team-a' });
    // and for a reader outside the vmkeeper group, through another client library
    const asNobody = await dbusSend(rig.bus.address, MANAGER_PATH, 'org.freedesktop.DBus.ObjectManager.GetManagedObjects', [], { as: NOBODY });
    expect(asNobody.ok).toBe(true);
  });

  it('a flood of huge mis-typed calls from nobody: each refused by name, others answered within 1 s, agent up', async () => {
    // Another client's reads, one after the other, for as long as the flood lasts.
    const reads: CallResult[] = [];
    let flooding = true;
    const prober = (async () => {
      while (flooding) reads.push(await getMachine('good'));
    })();
    const address = plainSocketAddress(rig.bus.address);
    const started = performance.now();
    const senders = await Promise.all(
      Array.from({ length: FLOOD_SENDERS }, () =>
        run(process.execPath, [FLOOD_SENDER, address, String(FLOOD_CALLS_EACH), String(FLOOD_BODY_BYTES)], { as: NOBODY, timeoutMs: 45_000 }),
      ),
    );
    const floodMs = performance.now() - started;
    flooding = false;
    await prober;
    const answers = senders.flatMap((s) => {
      expect(s.code, s.stderr).toBe(0);
      return JSON.parse(s.stdout) as { errorName: string; ms: number }[];
    });
    const slowest = Math.max(...reads.map((r) => r.ms));
    console.log(`flood: ${answers.length} x ${FLOOD_BODY_BYTES} B in ${Math.round(floodMs)} ms; ${reads.length} GetMachine, slowest ${Math.round(slowest)} ms`);
    expect(answers).toHaveLength(FLOOD_SENDERS * FLOOD_CALLS_EACH);
    expect(new Set(answers.map((a) => a.errorName))).toEqual(new Set(['org.freedesktop.DBus.Error.LimitsExceeded']));
    expect(reads.filter((r) => !r.ok)).toEqual([]);
    expect(reads.length).toBeGreaterThan(0);
    expect(slowest).toBeLessThan(1000);
    expect((await managedObjects()).ok).toBe(true);
    expect(rig.agent!.child.exitCode).toBeNull();
  }, 60_000);

  it('a mis-typed call under the size limit is refused as InvalidArgs', async () => {
    const r = await rawCall(rig.client, { path: MANAGER_PATH, iface: M, member: 'GetMachine', signature: 'u', body: [7] });
    expect(r.ok ? 'ok' : r.errorName).toBe('org.freedesktop.DBus.Error.InvalidArgs');
    expect((await getMachine('good')).ok).toBe(true);
  });
});
