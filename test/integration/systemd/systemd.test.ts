import { promises as fs } from 'node:fs';
import path from 'node:path';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { waitFor } from '../../support/wait.js';
import { bootAgentContainer, isRoot, prepareAgentContainers, type AgentContainer } from './container.js';
import { journalEntries } from './journal-query.js';
import { EVENT_MESSAGE_IDS } from '../../../src/logging/journal/message-ids.js';

// vmkeeperd under real systemd (nspawn-booted Debian 12, libvirt + TCG qemu inside). Root only.
// Warm cache: ~2 s per boot; the guest test boots two real guests (~10 s under TCG).

let a: AgentContainer | undefined;
afterEach(async () => {
  await a?.stop();
  a = undefined;
});

const show = async (prop: string) => (await a!.c.exec(['systemctl', 'show', '-P', prop, 'vmkeeperd'])).stdout.trim();
const lineIndex = (journal: string, re: RegExp) => journal.split('\n').findIndex((l) => re.test(l));

/** Our tests own the guests: libvirt-guests must not act on them too (see docs/operations.md). */
async function maskLibvirtGuests(x: AgentContainer) {
  await x.c.exec(['systemctl', 'stop', 'libvirt-guests']);
  await x.c.exec(['systemctl', 'mask', 'libvirt-guests']);
}

describe.skipIf(!isRoot)('vmkeeperd under systemd', () => {
  // On a fresh machine the first boot would build the Debian root inside a test's timeout.
  beforeAll(() => prepareAgentContainers(), 900_000);

  it('systemctl start returns only after READY: store loaded, libvirt connected, bus name owned', async () => {
    a = await bootAgentContainer({ name: 'vmk-ready' });
    const r = await a.c.exec(['systemctl', 'start', 'vmkeeperd'], { timeoutMs: 60_000 });
    expect(r.code).toBe(0);
    // No waiting: by the time start returns, everything READY promised is true.
    expect(await show('ActiveState')).toBe('active');
    expect(await show('Type')).toBe('notify');
    expect(await a.managerState()).toBe('running');
    expect(await show('StatusText')).toMatch(/^running: 0 machines, 0 running, 0 deleting, 0 powering off; last sweep/);
    const j = await a.c.journal('vmkeeperd');
    const started = lineIndex(j, /Started vmkeeperd\.service/);
    expect(started).toBeGreaterThan(0);
    for (const before of [/loaded 0 machine records/, /connected to libvirt/, /D-Bus name acquired/, /holding a logind shutdown delay lock \(D-Bus fd\)/]) {
      const i = lineIndex(j, before);
      expect(i, `${before} before Started`).toBeGreaterThanOrEqual(0);
      expect(i).toBeLessThan(started);
    }
  }, 60000);

  it('without libvirtd it is ready and degraded, and the watchdog keeps it alive', async () => {
    a = await bootAgentContainer({ name: 'vmk-degraded', watchdogSec: 4 });
    await a.c.exec(['systemctl', 'mask', '--now', 'libvirtd.service', 'libvirtd.socket', 'libvirtd-ro.socket', 'libvirtd-admin.socket']);
    const r = await a.c.exec(['systemctl', 'start', 'vmkeeperd'], { timeoutMs: 60_000 });
    expect(r.code).toBe(0);
    expect(await a.managerState()).toBe('degraded');
    expect(await show('StatusText')).toMatch(/^degraded \(libvirt unreachable, retrying\)/);
    const pid = await a.mainPid();
    // Watch it for three watchdog periods with libvirt down: same process throughout, never restarted.
    const until = Date.now() + 12_000;
    while (Date.now() < until) {
      expect(await a.mainPid()).toBe(pid);
      expect(await show('ActiveState')).toBe('active');
      await new Promise((r) => setTimeout(r, 500));
    }
    expect(await show('NRestarts')).toBe('0');
    expect(await show('ActiveState')).toBe('active');
    expect(await a.c.journal('vmkeeperd')).not.toMatch(/watchdog: not pinging/);
  }, 60000);

  it('a frozen agent (SIGSTOP from outside) is killed by the watchdog and restarted', async () => {
    a = await bootAgentContainer({ name: 'vmk-wedge', watchdogSec: 4 });
    await a.c.exec(['systemctl', 'start', 'vmkeeperd'], { timeoutMs: 60_000 });
    const pid = await a.mainPid();
    expect(pid).toBeGreaterThan(0);
    const frozenAt = Date.now();
    // A stopped process sends no pings: only systemd's watchdog can get the service back.
    expect((await a.sh(`kill -STOP ${pid}`)).code).toBe(0);
    await waitFor(async () => (await show('NRestarts')) === '1' && (await show('ActiveState')) === 'active', {
      timeoutMs: 30_000, intervalMs: 250, what: 'a watchdog restart',
    });
    const took = Date.now() - frozenAt;
    expect(await a.mainPid()).not.toBe(pid);
    expect(await a.managerState()).toBe('running');
    const j = await a.c.journal('vmkeeperd');
    expect(j).toMatch(/vmkeeperd\.service: Watchdog timeout/);
    expect(took).toBeGreaterThan(3000); // not before WatchdogSec=4s
  }, 60000);

  it('SIGHUP reloads runtime keys and rejects a broken file without changing anything', async () => {
    a = await bootAgentContainer({ name: 'vmk-reload' });
    await a.c.exec(['systemctl', 'start', 'vmkeeperd'], { timeoutMs: 60_000 });
    const timeout = async () => (await a!.busctl(['get-property', 'org.vmkeeper1', '/org/vmkeeper1', 'org.vmkeeper1.Manager', 'HostShutdownTimeoutSec'])).stdout.trim();
    expect(await timeout()).toBe('u 15');
    const pid = await a.mainPid();
    const cfg = '/etc/vmkeeper/config.yaml';
    await a.sh(`sed -i 's/timeoutSec: 15/timeoutSec: 25/; s/sweepIntervalSec: 2/sweepIntervalSec: 3/' ${cfg}`);
    expect((await a.c.exec(['systemctl', 'reload', 'vmkeeperd'])).code).toBe(0);
    await waitFor(async () => (await timeout()) === 'u 25', { timeoutMs: 5000, what: 'HostShutdownTimeoutSec 25' });
    await a.sh(`echo 'hostShutdown: {timeoutSec: -3}' > ${cfg}`);
    expect((await a.c.exec(['systemctl', 'reload', 'vmkeeperd'])).code).toBe(0);
    await waitFor(async () => /configuration reload rejected/.test(await a!.c.journal('vmkeeperd')), { timeoutMs: 5000, what: 'the rejection' });
    expect(await timeout()).toBe('u 25');
    expect(await a.mainPid()).toBe(pid);
    expect(await show('ActiveState')).toBe('active');
    const j = await a.c.journal('vmkeeperd');
    expect(j).toMatch(/configuration reloaded: applied hostShutdown\.timeoutSec/);
    expect(j).toMatch(/only applied by a restart .*machines\.sweepIntervalSec/);
    expect(j).toMatch(/Reloaded vmkeeperd\.service/);
  }, 60000);

  it('journalctl VMKEEPER_MACHINE= shows that machine\'s history and no other; MESSAGE_ID= finds every event of a kind', async () => {
    a = await bootAgentContainer({ name: 'vmk-journal' });
    await maskLibvirtGuests(a);
    expect((await a.c.exec(['systemctl', 'start', 'vmkeeperd'], { timeoutMs: 60_000 })).code).toBe(0);
    await a.createGuest('jrnl-a', 'acpi');
    await a.createGuest('jrnl-b', 'acpi');
    const started = () => journalEntries(a!, [`MESSAGE_ID=${EVENT_MESSAGE_IDS.Started}`]);
    await waitFor(async () => (await started()).length >= 2, { timeoutMs: 60_000, intervalMs: 500, what: 'both machines Started in the journal' });
    const del = await a.busctl(['call', 'org.vmkeeper1', '/org/vmkeeper1', 'org.vmkeeper1.Manager', 'DeleteMachineWithGracePeriod', 'su', 'jrnl-a', '0']);
    expect(del.code, del.stderr).toBe(0);
    const history = () => journalEntries(a!, ['-u', 'vmkeeperd', 'VMKEEPER_MACHINE=jrnl-a']);
    await waitFor(async () => (await history()).some((e) => e.VMKEEPER_REASON === 'Deleted'), { timeoutMs: 60_000, intervalMs: 500, what: 'jrnl-a Deleted in the journal' });

    const ofA = await history();
    expect(ofA.every((e) => e.VMKEEPER_MACHINE === 'jrnl-a' && !/jrnl-b/.test(e.MESSAGE ?? ''))).toBe(true);
    const reasons = ofA.map((e) => e.VMKEEPER_REASON);
    let last = -1;
    for (const reason of ['Created', 'Started', 'DeletionRequested', 'Deleted']) {
      const i = reasons.indexOf(reason, last + 1);
      expect(i, `${reason} after ${reasons.slice(0, last + 1).join(', ')} in ${reasons.join(', ')}`).toBeGreaterThan(last);
      last = i;
    }
    const created = ofA.find((e) => e.VMKEEPER_REASON === 'Created')!;
    expect(created).toMatchObject({
      MESSAGE_ID: EVENT_MESSAGE_IDS.Created,
      PRIORITY: '6',
      SYSLOG_IDENTIFIER: 'vmkeeperd',
      VMKEEPER_CALLER_UID: '0',
      VMKEEPER_CALLER_CALL: 'CreateMachine',
      _SYSTEMD_UNIT: 'vmkeeperd.service',
    });
    // The text stays what the stream line said.
    expect(created.MESSAGE).toMatch(/^jrnl-a: machine jrnl-a created machine=jrnl-a reason=Created sequence=\d+ uid=0 call=CreateMachine$/);
    const sequences = ofA.map((e) => Number(e.VMKEEPER_EVENT_SEQ));
    expect(sequences.every((n) => Number.isSafeInteger(n) && n > 0)).toBe(true);
    expect([...sequences].sort((x, y) => x - y)).toEqual(sequences);

    const ofB = await journalEntries(a, ['-u', 'vmkeeperd', 'VMKEEPER_MACHINE=jrnl-b']);
    expect(ofB.map((e) => e.VMKEEPER_REASON)).toEqual(expect.arrayContaining(['Created', 'Started']));
    expect(ofB.every((e) => e.VMKEEPER_MACHINE === 'jrnl-b' && !/jrnl-a/.test(e.MESSAGE ?? ''))).toBe(true);
    expect(ofB.map((e) => e.VMKEEPER_REASON)).not.toContain('Deleted');

    const allCreated = await journalEntries(a, [`MESSAGE_ID=${EVENT_MESSAGE_IDS.Created}`]);
    expect(allCreated.map((e) => e.VMKEEPER_MACHINE).sort()).toEqual(['jrnl-a', 'jrnl-b']);
    const deleted = await journalEntries(a, [`MESSAGE_ID=${EVENT_MESSAGE_IDS.Deleted}`]);
    expect(deleted.map((e) => e.VMKEEPER_MACHINE)).toEqual(['jrnl-a']);
    // Plain lines go through the socket too, still found by unit and text.
    expect(await a.c.journal('vmkeeperd')).toMatch(/connected to libvirt/);
  }, 180000);

  it('restart leaves guests running; poweroff shuts the obeying guest down and destroys the ignoring one at the timeout', async () => {
    a = await bootAgentContainer({ name: 'vmk-guests', hostShutdownTimeoutSec: 15 });
    await maskLibvirtGuests(a);
    await a.c.exec(['systemctl', 'start', 'vmkeeperd'], { timeoutMs: 60_000 });
    await a.createGuest('obey', 'acpi');
    await a.createGuest('ignore', 'ignore');
    await Promise.all([a.waitGuestReady('obey', 'acpi'), a.waitGuestReady('ignore', 'ignore')]);
    const pids = [await a.qemuPid('obey'), await a.qemuPid('ignore')];
    expect(pids.every((p) => p > 0)).toBe(true);

    // A restart of the agent leaves both guests alone and adopts them again.
    expect((await a.c.exec(['systemctl', 'restart', 'vmkeeperd'], { timeoutMs: 60_000 })).code).toBe(0);
    expect([await a.qemuPid('obey'), await a.qemuPid('ignore')]).toEqual(pids);
    expect(await a.domState('obey')).toBe('running');
    expect(await a.domState('ignore')).toBe('running');
    expect(await a.managerState()).toBe('running');
    const afterRestart = await a.c.journal('vmkeeperd');
    expect(afterRestart).toMatch(/service stop: the system is running: only the service stops; guests: left running/);

    // Host shutdown.
    const t0 = Date.now();
    await a.c.poweroff(120_000);
    const tookMs = Date.now() - t0;
    const j = await a.c.journal();
    const order = [
      /logind: the host is shutting down \(PrepareForShutdown\): starting guest shutdowns now/,
      /host shutdown: 2 running guests in 1 group; bound 15s/,
      /host shutdown: group 1\/1 \(priority >= 0, budget 15s\)/,
      /obey: host shutdown: shut down after \d+ ACPI requests?\b/,
      /SIGTERM received: stopping/,
      /host shutdown: systemd reports the system as stopping; guests: shut down/,
      /host shutdown: group 1\/1 budget of 15s spent: destroying 1 guest\b/,
      /ignore: host shutdown: ignored \d+ ACPI requests: destroyed at the budget end/,
      /host shutdown completed in .*: 1 shut down cleanly, 0 saved, 1 destroyed, 0 failed, 0 left running/,
      /released the logind shutdown delay lock/,
      /Stopped vmkeeperd\.service/,
      /Stopping libvirtd\.service/,
    ];
    let last = -1;
    for (const re of order) {
      const i = j.split('\n').findIndex((l, n) => n > last && re.test(l));
      expect(i, `journal line ${re} after line ${last}:\n${j.split('\n').filter((l) => /vmkeeperd|libvirtd/.test(l)).slice(-40).join('\n')}`).toBeGreaterThan(last);
      last = i;
    }
    expect(j).toMatch(/ACPI shutdown sent again to vmkeeper-ignore/);
    // "Failed to kill control group ..., ignoring" is systemd's own complaint on hosts whose
    // cgroup files refuse a write (it logs it for every unit, and goes on): not a failed stop.
    expect(j).not.toMatch(/vmkeeperd\.service: (State 'stop-sigterm' timed out|Killing process|Failed(?! to kill control group))/);
    expect(tookMs).toBeLessThan(60_000);
    // No record was changed: power stays on, so the reconciler starts them after the reboot.
    for (const name of ['obey', 'ignore']) {
      const rec = JSON.parse(await fs.readFile(path.join(a.c.root, 'var/lib/vmkeeper/machines', `${name}.json`), 'utf8'));
      expect(rec.spec.power).toBe('on');
      expect(rec.deletionTimestamp).toBe(0);
      expect(rec.status.forceStopAt).toBe(0);
    }
  }, 240000);
});
