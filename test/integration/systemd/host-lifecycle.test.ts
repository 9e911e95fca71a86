import { existsSync, promises as fs } from 'node:fs';
import path from 'node:path';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { bootedAgain, lastTick, readSerialProgress, waitForTick, whyNotResumed, type Tick } from '../../support/guest-images.js';
import { waitFor } from '../../support/wait.js';
import { bootAgentContainer, isRoot, prepareAgentContainers, type AgentContainer } from './container.js';

// Host lifecycle under real systemd (nspawn-booted Debian 12, libvirt + TCG qemu inside), with the
// container powered off and booted again from the same root, as a host reboots. Root only.

let a: AgentContainer | undefined;
afterEach(async () => {
  await a?.stop();
  a = undefined;
});

/** Our tests own the guests: libvirt-guests must not act on them too (see docs/operations.md). */
async function maskLibvirtGuests(x: AgentContainer) {
  await x.c.exec(['systemctl', 'stop', 'libvirt-guests']);
  await x.c.exec(['systemctl', 'mask', 'libvirt-guests']);
}

// The issue's scenario: three priority groups, one guest per action (and one that ignores ACPI).
// Stop order by shutdownPriority: saver (group 200) -> obey, forced (group 100) -> ignorer (group 0).
// Start order by startPriority after the reboot: saver, ignorer, obey, forced.
const GROUPS = [
  { minPriority: 200, budgetSec: 10 },
  { minPriority: 100, budgetSec: 10 },
  { minPriority: 0, budgetSec: 10 },
];
const BOUND_SEC = 30;
const GUESTS = {
  saver: { mode: 'acpi', hostShutdownAction: 'save', shutdownPriority: 300, startPriority: 100, group: 0, result: 'saved' },
  obey: { mode: 'acpi', hostShutdownAction: 'shutdown', shutdownPriority: 150, startPriority: 20, group: 1, result: 'clean' },
  forced: { mode: 'acpi', hostShutdownAction: 'force', shutdownPriority: 100, startPriority: 10, group: 1, result: 'forced' },
  ignorer: { mode: 'ignore', hostShutdownAction: 'shutdown', shutdownPriority: 0, startPriority: 50, group: 2, result: 'forced' },
} as const;
type GuestName = keyof typeof GUESTS;
const NAMES = Object.keys(GUESTS) as GuestName[];
const START_ORDER: GuestName[] = ['saver', 'ignorer', 'obey', 'forced'];

/** One ListEventsSince row: sequence, timestamp (us), machine, type, reason, message, caller uid, call. */
type EventRow = [number, number, string, string, string, string, ...unknown[]];
interface Ev { ms: number; machine: string; type: string; reason: string; message: string }

interface RecordMachine { machine: string; action: string; priority: number; group: number; result: string; afterMs: number; detail: string }
interface RecordGroup { minPriority: number; budgetSec: number; startedAt: number; finishedAt: number }
interface RecordJson { id: string; kind: string; result: string; startedAt: number; finishedAt: number; boundSec: number; groups: RecordGroup[]; machines: RecordMachine[] }

async function eventsOf(x: AgentContainer): Promise<Ev[]> {
  const [rows] = (await x.managerCall('ListEventsSince', 'ts', [0, ''])) as [EventRow[]];
  return rows.map((r) => ({ ms: Number(r[1]) / 1000, machine: r[2], type: r[3], reason: r[4], message: r[5] }));
}

describe.skipIf(!isRoot)('host lifecycle under systemd', () => {
  beforeAll(() => prepareAgentContainers(), 900_000);

  it('a guest saved by our adapter inside the container resumes after the container boots again; the agent adopts it', async () => {
    a = await bootAgentContainer({ name: 'vmk-resume' });
    await maskLibvirtGuests(a);
    expect((await a.c.exec(['systemctl', 'start', 'vmkeeperd'], { timeoutMs: 60_000 })).code).toBe(0);
    await a.createGuest('keep', 'acpi');
    await a.waitGuestReady('keep', 'acpi');
    await waitForTick(a.serialLog('keep'), 3, 20_000);
    // The agent stops alone (onServiceStop: leave), so nothing starts the guest again behind the save.
    expect((await a.c.exec(['systemctl', 'stop', 'vmkeeperd'], { timeoutMs: 60_000 })).code).toBe(0);
    expect(await a.domState('keep')).toBe('running');

    const file = '/var/lib/vmkeeper/guests/keep/saved-state';
    const saved = await a.adapter('save', 'vmkeeper-keep', file);
    expect(saved.code, saved.stderr).toBe(0);
    expect(await a.domState('keep')).toBe('shut off');
    const lastBefore = await lastTick(a.serialLog('keep'));
    const size = (await fs.stat(path.join(a.c.root, file))).size;

    const off0 = Date.now();
    await a.c.poweroff(60_000);
    const poweroffMs = Date.now() - off0;
    expect(existsSync(path.join(a.c.root, file))).toBe(true);

    const boot0 = Date.now();
    await a.bootAgain();
    const bootMs = Date.now() - boot0;
    // libvirt's definition survived the reboot; the guest is not running until it is restored.
    expect(await a.domState('keep')).toBe('shut off');
    const restored = await a.adapter('restore', file);
    expect(restored.code, restored.stderr).toBe(0);
    expect(await a.domState('keep')).toBe('running');
    await waitForTick(a.serialLog('keep'), lastBefore.n + 3, 30_000);
    const after = await readSerialProgress(a.serialLog('keep'));
    expect(whyNotResumed(lastBefore, after)).toBeUndefined();

    // The agent's records survived too: it starts, finds its machine and adopts the running guest.
    expect((await a.c.exec(['systemctl', 'start', 'vmkeeperd'], { timeoutMs: 60_000 })).code).toBe(0);
    const state = async () => (await a!.busctl(['get-property', 'org.vmkeeper1', '/org/vmkeeper1/machine/keep', 'org.vmkeeper1.Machine', 'State'])).stdout.trim();
    await waitFor(async () => (await state()) === 's "running"', { timeoutMs: 20_000, intervalMs: 250, what: 'keep running in the agent' });
    expect(whyNotResumed(lastBefore, await readSerialProgress(a.serialLog('keep')))).toBeUndefined();
    console.log(`under systemd: ${saved.stdout.trim()} (${(size / 1048576).toFixed(1)} MiB), poweroff ${poweroffMs} ms, ` +
      `second boot to running ${bootMs} ms, ${restored.stdout.trim()}; counter ${lastBefore.n} -> ${after.ticks.at(-1)!.n}`);
  }, 240_000);

  it('poweroff stops three priority groups in order (save, shutdown, force, ignored ACPI destroyed at its budget) within the bound; after the boot the saved guest resumes, the others start in start-priority order, and the record says it all', async () => {
    // One start at a time: the recorded order is then the start order itself, not which start finished first.
    a = await bootAgentContainer({ name: 'vmk-groups', hostShutdownTimeoutSec: BOUND_SEC, hostShutdownGroups: GROUPS, restore: { parallelism: 1 } });
    await maskLibvirtGuests(a);
    // Enabled, as a package installs it: it starts again when the container boots again.
    expect((await a.c.exec(['systemctl', 'enable', '--now', 'vmkeeperd'], { timeoutMs: 60_000 })).code).toBe(0);
    for (const name of NAMES) {
      const { mode, group: _g, result: _r, ...lifecycle } = GUESTS[name];
      await a.createGuest(name, mode, lifecycle);
    }
    await Promise.all(NAMES.map((name) => a!.waitGuestReady(name, GUESTS[name].mode, 120_000)));
    await waitForTick(a.serialLog('saver'), 3, 20_000);

    // --- poweroff ---------------------------------------------------------------------------
    const off0 = Date.now();
    await a.c.poweroff(120_000);
    const poweroffMs = Date.now() - off0;
    const savedFile = path.join(a.c.root, 'var/lib/vmkeeper/guests/saver/saved-state');
    expect(existsSync(savedFile), 'the saved state of saver').toBe(true);
    const savedMiB = (await fs.stat(savedFile)).size / 1048576;
    const beforeReboot = {} as { [name in GuestName]: Tick };
    for (const name of NAMES) beforeReboot[name] = await lastTick(a.serialLog(name));
    expect(poweroffMs, 'container down within the bound plus 2 s').toBeLessThan((BOUND_SEC + 2) * 1000);

    // --- boot again ---------------------------------------------------------------------------
    const boot0 = Date.now();
    await a.bootAgain();
    const machineState = async (n: string) => (await a!.busctl(['get-property', 'org.vmkeeper1', `/org/vmkeeper1/machine/${n}`, 'org.vmkeeper1.Machine', 'State'])).stdout.trim();
    await waitFor(async () => (await Promise.all(NAMES.map(machineState))).every((s) => s === 's "running"'), {
      timeoutMs: 90_000, intervalMs: 500, what: 'every machine running after the boot',
    });
    await Promise.all(NAMES.filter((n) => n !== 'saver').map((n) => a!.waitGuestReady(n, GUESTS[n].mode, 120_000)));
    await waitForTick(a.serialLog('saver'), beforeReboot.saver.n + 3, 30_000);
    const backMs = Date.now() - boot0;

    // The saved guest resumed: its counter goes on from where it was, no boot in between.
    const resumed = await readSerialProgress(a.serialLog('saver'));
    expect(whyNotResumed(beforeReboot.saver, resumed)).toBeUndefined();
    // Whoever restores deletes the file.
    await waitFor(() => !existsSync(savedFile), { timeoutMs: 10_000, what: 'the saved state removed after the restore' });
    // The others booted fresh: a new boot id, the counter from 1. READY comes before the first TICK,
    // so the last guest started may not have counted yet: wait for its first tick of the new boot.
    for (const name of NAMES.filter((n) => n !== 'saver')) {
      await waitFor(async () => bootedAgain(beforeReboot[name], await readSerialProgress(a!.serialLog(name))), {
        timeoutMs: 30_000, intervalMs: 200, what: `${name} to tick in a new boot (was boot=${beforeReboot[name].boot})`,
      });
    }

    // --- what the events say --------------------------------------------------------------
    const evs = await eventsOf(a);
    const started = evs.filter((e) => e.machine === '' && e.reason === 'HostShutdownStarted').at(-1);
    const completed = evs.filter((e) => e.machine === '' && e.reason === 'HostShutdownCompleted').at(-1);
    expect(started, 'HostShutdownStarted').toBeDefined();
    expect(completed, 'HostShutdownCompleted').toBeDefined();
    const during = evs.filter((e) => e.ms >= started!.ms && e.ms <= completed!.ms);
    const at = (machine: GuestName, reason: string) => {
      const e = during.find((x) => x.machine === machine && x.reason === reason);
      expect(e, `${machine} ${reason} during the host shutdown: ${during.map((x) => `${x.machine || '(host)'} ${x.reason}`).join(', ')}`).toBeDefined();
      return e!.ms;
    };
    const saved = at('saver', 'Saved');
    const obeyAsked = at('obey', 'ShutdownRequested');
    const obeyDone = at('obey', 'ShutdownCompleted');
    const forcedDone = at('forced', 'ForceStopped');
    const ignorerAsked = at('ignorer', 'ShutdownRequested');
    const ignorerDestroyed = at('ignorer', 'ForceStopped');
    // Group by group: the high group's guest is done before the next group's first request.
    expect(saved).toBeLessThanOrEqual(Math.min(obeyAsked, forcedDone));
    expect(Math.max(obeyDone, forcedDone)).toBeLessThanOrEqual(ignorerAsked);
    expect(during.filter((e) => e.reason === 'SaveFailed' || e.reason === 'StopFailed')).toEqual([]);
    expect(during.some((e) => e.machine === 'ignorer' && e.reason === 'ShutdownCompleted')).toBe(false);
    expect(during.some((e) => e.machine === 'forced' && e.reason === 'ShutdownRequested')).toBe(false);

    const after = evs.filter((e) => e.ms >= boot0);
    const firstStart = (n: GuestName) => after.findIndex((e) => e.machine === n && (e.reason === 'Started' || e.reason === 'Restored'));
    expect(after.some((e) => e.machine === 'saver' && e.reason === 'Restored'), 'saver Restored').toBe(true);
    expect(after.some((e) => e.machine === 'saver' && e.reason === 'Started'), 'saver not started fresh').toBe(false);
    const order = START_ORDER.map(firstStart);
    expect(order.every((i) => i >= 0), `every guest back: ${after.map((e) => `${e.machine || '(host)'} ${e.reason}`).join(', ')}`).toBe(true);
    expect([...order].sort((x, y) => x - y), `start order ${START_ORDER.join(' > ')}`).toEqual(order);
    expect(after.filter((e) => e.reason === 'RestoreFailed' || e.reason === 'SavedStateDiscarded')).toEqual([]);

    // --- the shutdown record, read after the reboot ----------------------------------------
    const [list] = (await a.managerCall('ListShutdownRecords')) as [Array<[string, string, string, number, number]>];
    const last = list.at(-1);
    expect(last?.slice(1, 3)).toEqual(['host-shutdown', 'completed']);
    const [json] = (await a.managerCall('DescribeShutdownRecord', 's', [last![0]])) as [string];
    const record = JSON.parse(json) as RecordJson;
    expect(record.boundSec).toBe(BOUND_SEC);
    expect(record.groups.map((g) => [g.minPriority, g.budgetSec])).toEqual(GROUPS.map((g) => [g.minPriority, g.budgetSec]));
    record.groups.forEach((g, i) => {
      expect(g.startedAt, `group ${i} started`).toBeGreaterThan(0);
      expect(g.finishedAt).toBeGreaterThanOrEqual(g.startedAt);
      if (i > 0) expect(g.startedAt, `group ${i} starts after group ${i - 1} ended`).toBeGreaterThanOrEqual(record.groups[i - 1]!.finishedAt);
    });
    // The first two groups end when their guests are off, long before their budgets.
    expect(record.groups[0]!.finishedAt - record.groups[0]!.startedAt).toBeLessThan(GROUPS[0]!.budgetSec * 1000 - 2000);
    expect(record.groups[1]!.finishedAt - record.groups[1]!.startedAt).toBeLessThan(GROUPS[1]!.budgetSec * 1000 - 2000);
    // The ignoring guest is destroyed at its group's budget: not earlier, not much later.
    const destroyedAfter = ignorerDestroyed - record.groups[2]!.startedAt;
    expect(destroyedAfter).toBeGreaterThanOrEqual(GROUPS[2]!.budgetSec * 1000 - 500);
    expect(destroyedAfter).toBeLessThan(GROUPS[2]!.budgetSec * 1000 + 4000);
    for (const name of NAMES) {
      const m = record.machines.find((x) => x.machine === name);
      expect(m, `${name} in the record`).toMatchObject({ action: GUESTS[name].hostShutdownAction, priority: GUESTS[name].shutdownPriority, group: GUESTS[name].group, result: GUESTS[name].result });
    }
    const runMs = record.finishedAt - record.startedAt;
    expect(runMs).toBeLessThan(BOUND_SEC * 1000);
    // Nothing else held the poweroff up (libvirtd's own delay lock, a stop timeout): the container
    // went down a few seconds after the run, not at some later limit.
    expect(poweroffMs).toBeLessThan(runMs + 5000);

    // vmkeeperctl shows the same record.
    const ctlList = await a.c.exec(['vmkeeperctl', 'shutdowns']);
    expect(ctlList.code, ctlList.stderr).toBe(0);
    expect(ctlList.stdout).toContain(record.id);
    const ctlOne = await a.c.exec(['vmkeeperctl', 'shutdowns', record.id]);
    expect(ctlOne.code, ctlOne.stderr).toBe(0);
    for (const name of NAMES) {
      expect(ctlOne.stdout).toMatch(new RegExp(`^\\s*${name}\\s+${GUESTS[name].hostShutdownAction}\\s+${GUESTS[name].shutdownPriority}\\s+${GUESTS[name].group}\\s+${GUESTS[name].result}\\b`, 'm'));
    }

    // systemd never had to kill the agent.
    const j = await a.c.journal('vmkeeperd');
    expect(j).not.toMatch(/vmkeeperd\.service: (State 'stop-sigterm' timed out|Killing process)/);
    console.log(`host lifecycle under systemd: poweroff ${poweroffMs} ms (bound ${BOUND_SEC} s); run ${(runMs / 1000).toFixed(1)} s, ` +
      `groups ${record.groups.map((g) => ((g.finishedAt - g.startedAt) / 1000).toFixed(1)).join(' / ')} s; ignorer destroyed ${destroyedAfter} ms into its group (budget ${GROUPS[2]!.budgetSec} s); ` +
      `saved state ${savedMiB.toFixed(1)} MiB; boot to every guest back ${backMs} ms; saver counter ${beforeReboot.saver.n} -> ${resumed.ticks.at(-1)!.n}`);
  }, 420_000);
});
