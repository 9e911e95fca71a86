import { mkdtemp, readdir, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { busctlCall, busctlGetProperty, dbusSend } from '../../support/busctl.js';
import { startSystemBus, type PrivateBus } from '../../support/dbus-daemon.js';
import { startAgent, type AgentProcess, type AgentProcessOptions } from '../../support/agent-process.js';
import { ensureGuestImages, GUEST_CACHE_DIR, LIBVIRT_CACHE_DIR, READY_LINE, waitForSerialLine, type GuestImages } from '../../support/guest-images.js';
import { startLibvirtd, virsh, type PrivateLibvirtd } from '../../support/libvirtd.js';
import { waitFor } from '../../support/wait.js';

// Graceful deletion and power-off on real qemu guests (TCG) under a real libvirtd, driven through
// the real agent over D-Bus: a guest that powers off on the ACPI button and one that ignores it.

const isRoot = process.getuid?.() === 0;
const MANAGER = ['/org/vmkeeper1', 'org.vmkeeper1.Manager'] as const;
const GRACE = 8;

let bus: PrivateBus;
let libvirtd: PrivateLibvirtd;
let images: GuestImages;
let dir: string;
let opts: AgentProcessOptions;
let agent: AgentProcess;

type Mode = 'acpi' | 'ignore';
type Event = [bigint | number, string, string, string, string];

const spec = (mode: Mode, extra: Record<string, unknown> = {}) =>
  JSON.stringify({
    cpus: 1,
    memoryMiB: 96,
    domainType: 'qemu',
    boot: { kernel: images.kernel, initrd: mode === 'acpi' ? images.initrdAcpi : images.initrdIgnore, cmdline: 'console=ttyS0' },
    ...extra,
  });
const call = (method: string, sig = '', args: (string | number)[] = []) => busctlCall(bus.address, ...MANAGER, method, sig, args);
const machinePath = (name: string) => `/org/vmkeeper1/machine/${name.replace(/-/g, '_2d')}`;
const state = async (name: string) => (await busctlGetProperty(bus.address, machinePath(name), 'org.vmkeeper1.Machine', 'State')).data;
const usec = async (name: string, prop: string) => Number((await busctlGetProperty(bus.address, machinePath(name), 'org.vmkeeper1.Machine', prop)).data) / 1000;
const events = async (name: string) => ((await call('ListEvents')).data as [Event[]])[0].filter((e) => e[1] === name);
const reasons = async (name: string) => (await events(name)).map((e) => e[3]);
const exists = async (name: string) => !(await dbusSend(bus.address, MANAGER[0], `${MANAGER[1]}.GetMachine`, [`string:${name}`])).errorName;
const serialLog = (name: string) => path.join(opts.stateDir, 'guests', name, 'serial.log');
const domainState = async (name: string) => (await virsh(libvirtd.uri, ['domstate', `vmkeeper-${name}`])).stdout.trim();

async function createAndBoot(name: string, mode: Mode, extra?: Record<string, unknown>): Promise<void> {
  await call('CreateMachine', 'ss', [name, spec(mode, extra)]);
  await waitFor(async () => (await state(name)) === 'running', { timeoutMs: 30_000, what: `${name} running` });
  await waitForSerialLine(serialLog(name), READY_LINE(mode), 60_000);
}

async function expectGone(name: string): Promise<void> {
  expect(await exists(name)).toBe(false);
  expect((await virsh(libvirtd.uri, ['list', '--all', '--name'])).stdout).not.toContain(`vmkeeper-${name}`);
  expect(await readdir(path.join(opts.stateDir, 'guests'))).not.toContain(name);
  expect(await readdir(path.join(opts.stateDir, 'machines'))).not.toContain(`${name}.json`);
}

describe.skipIf(!isRoot)('graceful deletion and power-off on real qemu guests', () => {
  beforeAll(async () => {
    images = await ensureGuestImages();
    dir = await mkdtemp(path.join(os.tmpdir(), 'vmk-qemu-'));
    libvirtd = await startLibvirtd({ runDir: path.join(dir, 'lv'), cacheDir: LIBVIRT_CACHE_DIR });
    bus = await startSystemBus();
    opts = { busAddress: bus.address, stateDir: path.join(dir, 'state'), imageDir: GUEST_CACHE_DIR, libvirtUri: libvirtd.uri };
    agent = await startAgent(opts);
  }, 300_000);

  afterAll(async () => {
    await agent?.stop();
    await libvirtd?.stop();
    await bus?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  }, 60_000);

  it('ends an obeying guest cleanly and destroys an ignoring one at the deadline; nothing is left', async () => {
    await Promise.all([createAndBoot('obey-1', 'acpi'), createAndBoot('ignore-1', 'ignore')]);
    const t0 = Date.now();
    await call('DeleteMachineWithGracePeriod', 'su', ['obey-1', GRACE]);
    await call('DeleteMachineWithGracePeriod', 'su', ['ignore-1', GRACE]);
    const deadline = await usec('ignore-1', 'ForceStopAt');
    expect(deadline - t0).toBeGreaterThan(GRACE * 1000 - 1000);
    // A machine being deleted refuses power changes.
    const refused = await dbusSend(bus.address, MANAGER[0], `${MANAGER[1]}.SetMachinePower`, ['string:ignore-1', 'string:on']);
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
    expect(await readdir(path.join(opts.stateDir, 'guests'))).toContain('power-1');
    await call('SetMachinePower', 'ss', ['power-1', 'on']);
    await waitFor(async () => (await state('power-1')) === 'running' && (await domainState('power-1')) === 'running', { timeoutMs: 30_000, what: 'power-1 running again' });
    await call('DeleteMachineWithGracePeriod', 'su', ['power-1', 0]);
    await waitFor(async () => !(await exists('power-1')), { timeoutMs: 30_000, what: 'power-1 gone' });
    await expectGone('power-1');
  }, 180_000);

  it('deleting a guest during boot: the first press is missed, a resend works', async () => {
    await call('CreateMachine', 'ss', ['boot-1', spec('acpi')]);
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
    const qemuPid = async () => (await virsh(libvirtd.uri, ['domid', 'vmkeeper-keep-1'])).stdout.trim();
    const idBefore = await qemuPid();
    await call('DeleteMachineWithGracePeriod', 'su', ['late-1', 12]);
    const deadline = await usec('late-1', 'ForceStopAt');
    await waitFor(async () => (await reasons('late-1')).includes('ShutdownRequested'), { timeoutMs: 10_000, what: 'first request' });
    await agent.stop('SIGKILL');
    agent = await startAgent(opts);
    expect(await usec('late-1', 'ForceStopAt')).toBe(deadline);
    await waitFor(async () => !(await exists('late-1')), { timeoutMs: 40_000, what: 'late-1 gone' });
    const forced = (await events('late-1')).find((e) => e[3] === 'ForceStopped')!;
    expect(Number(forced[0]) / 1000 - deadline).toBeLessThan(5000);
    expect((await events('late-1')).filter((e) => e[3] === 'ShutdownRequested')).toHaveLength(0); // not sent twice
    await expectGone('late-1');

    expect((await agent.stop('SIGTERM')).code).toBe(0);
    expect(await domainState('keep-1')).toBe('running');
    agent = await startAgent(opts);
    await waitFor(async () => (await state('keep-1')) === 'running', { timeoutMs: 10_000, what: 'keep-1 adopted' });
    expect(await qemuPid()).toBe(idBefore); // the same domain instance: adopted, not restarted
  }, 240_000);
});
