import { readdir } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dbusSend } from '../../support/busctl.js';
import { MANAGER, QemuRig } from '../../support/qemu-rig.js';
import { waitFor } from '../../support/wait.js';

// Graceful deletion and power-off on real qemu guests (TCG) under a real libvirtd, driven through
// the real agent over D-Bus: a guest that powers off on the ACPI button and one that ignores it.

const isRoot = process.getuid?.() === 0;
const GRACE = 8;

let rig: QemuRig;
const call = (...a: Parameters<QemuRig['call']>) => rig.call(...a);
const events = (name: string) => rig.events(name);
const reasons = (name: string) => rig.reasons(name);
const exists = (name: string) => rig.exists(name);
const state = (name: string) => rig.state(name);
const usec = (name: string, prop: string) => rig.usec(name, prop);
const domainState = (name: string) => rig.domainState(name);
const createAndBoot = (...a: Parameters<QemuRig['createAndBoot']>) => rig.createAndBoot(...a);

async function expectGone(name: string): Promise<void> {
  expect(await exists(name)).toBe(false);
  expect((await rig.virsh(['list', '--all', '--name'])).stdout).not.toContain(`vmkeeper-${name}`);
  expect(await readdir(path.join(rig.opts.stateDir, 'guests'))).not.toContain(name);
  // Record files trail the journal by up to the store's file lag (100 ms).
  await waitFor(async () => !(await readdir(path.join(rig.opts.stateDir, 'machines'))).includes(`${name}.json`), { timeoutMs: 5000, what: `machines/${name}.json removed` });
}

describe.skipIf(!isRoot)('graceful deletion and power-off on real qemu guests', () => {
  beforeAll(async () => {
    rig = await QemuRig.start();
  }, 300_000);

  afterAll(async () => {
    await rig?.stop();
  }, 60_000);

  it('ends an obeying guest cleanly and destroys an ignoring one at the deadline; nothing is left', async () => {
    await Promise.all([createAndBoot('obey-1', 'acpi'), createAndBoot('ignore-1', 'ignore')]);
    const t0 = Date.now();
    await call('DeleteMachineWithGracePeriod', 'su', ['obey-1', GRACE]);
    await call('DeleteMachineWithGracePeriod', 'su', ['ignore-1', GRACE]);
    const deadline = await usec('ignore-1', 'ForceStopAt');
    expect(deadline - t0).toBeGreaterThan(GRACE * 1000 - 1000);
    // A machine being deleted refuses power changes.
    const refused = await dbusSend(rig.bus.address, MANAGER[0], `${MANAGER[1]}.SetMachinePower`, ['string:ignore-1', 'string:on']);
    expect(refused.errorName).toBe('org.vmkeeper1.Error.MachineTerminating');

    await waitFor(async () => !(await exists('obey-1')), { timeoutMs: 30_000, what: 'obey-1 gone' });
    const obeyGoneAfter = Date.now() - t0;
    expect(obeyGoneAfter).toBeLessThan(GRACE * 1000 - 2000); // long before the deadline
    const obey = await reasons('obey-1');
    expect(obey).toEqual(expect.arrayContaining(['ShutdownRequested', 'ShutdownCompleted', 'Deleted']));
    expect(obey).not.toContain('ForceStopped');

    await waitFor(async () => !(await exists('ignore-1')), { timeoutMs: 30_000, what: 'ignore-1 gone' });
    const ignore = await events('ignore-1');
    const forced = ignore.find((e) => e[3] === 'ForceStopped');
    expect(forced).toBeDefined();
    expect(forced![2]).toBe('warning');
    const lateness = Number(forced![0]) / 1000 - deadline;
    expect(lateness).toBeGreaterThanOrEqual(0);
    expect(lateness).toBeLessThan(5000); // destroy of a real qemu takes ~1-2 s; the timer fires at the deadline
    const issuedLate = Number(/issued (\d+) ms after the deadline/.exec(forced![4])?.[1]);
    expect(issuedLate).toBeLessThan(1000); // the destroy is issued on a timer set for the deadline itself
    expect(ignore.map((e) => e[3])).not.toContain('ShutdownCompleted');
    expect(ignore.filter((e) => e[3] === 'ShutdownRetried').length).toBeGreaterThanOrEqual(1);
    console.log(`real guests: obeying guest gone ${obeyGoneAfter} ms after delete; ignoring guest destroy issued ${issuedLate} ms after forceStopAt, event ${Math.round(lateness)} ms after it (destroy of qemu included)`);
    await expectGone('obey-1');
    await expectGone('ignore-1');
  }, 180_000);

  it('powers an obeying guest off gracefully, keeps it, and powers it on again', async () => {
    await createAndBoot('power-1', 'acpi');
    await call('SetMachinePower', 'ss', ['power-1', 'off']);
    await waitFor(async () => (await state('power-1')) === 'stopped', { timeoutMs: 30_000, what: 'power-1 stopped' });
    expect(await domainState('power-1')).toBe('shut off');
    expect(await reasons('power-1')).toEqual(expect.arrayContaining(['ShutdownRequested', 'ShutdownCompleted', 'Stopped']));
    expect(await readdir(path.join(rig.opts.stateDir, 'guests'))).toContain('power-1');
    await call('SetMachinePower', 'ss', ['power-1', 'on']);
    await waitFor(async () => (await state('power-1')) === 'running' && (await domainState('power-1')) === 'running', { timeoutMs: 30_000, what: 'power-1 running again' });
    await call('DeleteMachineWithGracePeriod', 'su', ['power-1', 0]);
    await waitFor(async () => !(await exists('power-1')), { timeoutMs: 30_000, what: 'power-1 gone' });
    await expectGone('power-1');
  }, 180_000);

  it('deleting a guest during boot: the first press is missed, a resend works', async () => {
    await call('CreateMachine', 'ss', ['boot-1', rig.spec('acpi')]);
    await waitFor(async () => (await domainState('boot-1')) === 'running', { timeoutMs: 30_000, what: 'boot-1 domain started' });
    await call('DeleteMachineWithGracePeriod', 'su', ['boot-1', 60]);
    await waitFor(async () => !(await exists('boot-1')), { timeoutMs: 90_000, intervalMs: 250, what: 'boot-1 gone' });
    const r = await reasons('boot-1');
    expect(r.filter((x) => x === 'ShutdownRetried').length).toBeGreaterThanOrEqual(1);
    expect(r).toContain('ShutdownCompleted');
    expect(r).not.toContain('ForceStopped');
  }, 180_000);

  it('a kill -9 during a deletion moves no deadline; a plain restart leaves a running guest running', async () => {
    await Promise.all([createAndBoot('keep-1', 'acpi'), createAndBoot('late-1', 'ignore')]);
    const qemuPid = async () => (await rig.virsh(['domid', 'vmkeeper-keep-1'])).stdout.trim();
    const idBefore = await qemuPid();
    await call('DeleteMachineWithGracePeriod', 'su', ['late-1', 12]);
    const deadline = await usec('late-1', 'ForceStopAt');
    await waitFor(async () => (await reasons('late-1')).includes('ShutdownRequested'), { timeoutMs: 10_000, what: 'first request' });
    await rig.agent.stop('SIGKILL');
    await rig.startAgent();
    expect(await usec('late-1', 'ForceStopAt')).toBe(deadline);
    await waitFor(async () => !(await exists('late-1')), { timeoutMs: 40_000, what: 'late-1 gone' });
    const forced = (await events('late-1')).find((e) => e[3] === 'ForceStopped')!;
    expect(Number(forced[0]) / 1000 - deadline).toBeLessThan(5000);
    // The event journal survives the kill, so the request made before it is normally listed (unless
    // the kill beat its batched write by a few ms); what must never appear is a second one.
    expect((await events('late-1')).filter((e) => e[3] === 'ShutdownRequested').length).toBeLessThanOrEqual(1);
    await expectGone('late-1');

    expect((await rig.agent.stop('SIGTERM')).code).toBe(0);
    expect(await domainState('keep-1')).toBe('running');
    await rig.startAgent();
    await waitFor(async () => (await state('keep-1')) === 'running', { timeoutMs: 10_000, what: 'keep-1 adopted' });
    expect(await qemuPid()).toBe(idBefore); // the same domain instance: adopted, not restarted
  }, 240_000);
});
