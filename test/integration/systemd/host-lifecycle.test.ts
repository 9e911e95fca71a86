import { existsSync, promises as fs } from 'node:fs';
import path from 'node:path';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { readSerialProgress, waitForTick } from '../../support/guest-images.js';
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
    const lastBefore = (await readSerialProgress(a.serialLog('keep'))).ticks.at(-1)!;
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
    await waitForTick(a.serialLog('keep'), lastBefore + 3, 30_000);
    const after = await readSerialProgress(a.serialLog('keep'));
    expect(after.ticks[0], `ticks after the restore: ${after.ticks.join(',')}`).toBe(lastBefore + 1);
    expect(after.readyLines).toBe(0);
    expect(after.kernelBoots).toBe(0);

    // The agent's records survived too: it starts, finds its machine and adopts the running guest.
    expect((await a.c.exec(['systemctl', 'start', 'vmkeeperd'], { timeoutMs: 60_000 })).code).toBe(0);
    const state = async () => (await a!.busctl(['get-property', 'org.vmkeeper1', '/org/vmkeeper1/machine/keep', 'org.vmkeeper1.Machine', 'State'])).stdout.trim();
    await waitFor(async () => (await state()) === 's "running"', { timeoutMs: 20_000, intervalMs: 250, what: 'keep running in the agent' });
    expect((await readSerialProgress(a.serialLog('keep'))).readyLines).toBe(0);
    console.log(`under systemd: ${saved.stdout.trim()} (${(size / 1048576).toFixed(1)} MiB), poweroff ${poweroffMs} ms, ` +
      `second boot to running ${bootMs} ms, ${restored.stdout.trim()}; counter ${lastBefore} -> ${after.ticks.at(-1)}`);
  }, 240_000);
});
