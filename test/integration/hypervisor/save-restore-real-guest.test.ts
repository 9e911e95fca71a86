import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chmod, mkdtemp, open, readFile, rm, stat } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LibvirtHypervisor } from '../../../src/hypervisor/libvirt/libvirt-hypervisor.js';
import { systemClock } from '../../../src/lifecycle/clock.js';
import { silentLogger } from '../../../src/logging/logger.js';
import { domainNameFor } from '../../../src/machine/names.js';
import {
  ensureGuestImages, LIBVIRT_CACHE_DIR, READY_LINE, serialProgress, waitForSerialLine, waitForTick, whyNotResumed, type GuestImages,
} from '../../support/guest-images.js';
import { startLibvirtd, type PrivateLibvirtd } from '../../support/libvirtd.js';
import { waitFor } from '../../support/wait.js';

// virDomainSave/virDomainRestore through our libvirt adapter on a real TCG guest (96 MiB) under a
// private libvirtd: the guest must resume where it was, not boot again. The guest prints a counter
// on its serial console every second; a resumed guest counts on, a rebooted one prints READY and
// starts at 1 again.
const canRunQemu = process.getuid?.() === 0 && existsSync('/usr/sbin/libvirtd') && existsSync('/usr/bin/qemu-system-x86_64');

describe.skipIf(!canRunQemu)('save and restore of a real qemu guest through the libvirt adapter', () => {
  let dir: string;
  let images: GuestImages;
  let libvirtd: PrivateLibvirtd;
  let hv: LibvirtHypervisor;

  beforeAll(async () => {
    images = await ensureGuestImages();
    dir = await mkdtemp(path.join(os.tmpdir(), 'vmk-save-'));
    await chmod(dir, 0o755);
    libvirtd = await startLibvirtd({ runDir: path.join(dir, 'lv'), cacheDir: LIBVIRT_CACHE_DIR });
    hv = new LibvirtHypervisor({ uri: libvirtd.uri, callTimeoutMs: 10_000, logger: silentLogger, clock: systemClock });
    await hv.connect();
  }, 300_000);

  afterAll(async () => {
    await hv?.close();
    await libvirtd?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  }, 60_000);

  it('resumes the guest from the file (counter goes on, no second boot), ACPI works after; an unfinished save is refused', async () => {
    const machine = 'saved-1';
    const domain = domainNameFor(machine);
    const serial = path.join(dir, `${machine}.serial.log`);
    const file = path.join(dir, `${machine}.saved-state`);
    await hv.defineDomain({
      domainName: domain, uuid: randomUUID(), machineName: machine, domainType: 'qemu', cpus: 1, memoryMiB: 96,
      boot: { kernel: images.kernel, initrd: images.initrdAcpi, cmdline: 'console=ttyS0' },
      diskFiles: [], nics: [], serialLogFile: serial, createdAt: Date.now(),
    });
    await hv.startDomain(domain);
    await waitForSerialLine(serial, READY_LINE('acpi'), 60_000);
    await waitForTick(serial, 3, 20_000);

    const saveStart = Date.now();
    await hv.saveDomain(domain, file, 60_000);
    const saveMs = Date.now() - saveStart;
    expect(await hv.domainState(domain)).toBe('shutoff'); // stopped, still defined
    const beforeText = await readFile(serial, 'utf8');
    const before = serialProgress(beforeText);
    const lastBefore = before.ticks.at(-1)!;
    expect(before.readyLines).toBe(1);
    const size = (await stat(file)).size;

    const restoreStart = Date.now();
    await hv.restoreDomain(file, 60_000);
    const restoreMs = Date.now() - restoreStart;
    expect(await hv.domainState(domain)).toBe('running');
    await waitForTick(serial, lastBefore.n + 3, 30_000);

    const afterText = await readFile(serial, 'utf8');
    const after = serialProgress(afterText);
    expect(whyNotResumed(lastBefore, after), `serial log after the restore:\n${afterText.slice(-2000)}`).toBeUndefined();
    // The file stays: whoever restores deletes it.
    expect(existsSync(file)).toBe(true);

    // The resumed guest still has its acpid: the button powers it off.
    const offStart = Date.now();
    await hv.shutdownDomain(domain);
    await waitFor(async () => (await hv.domainState(domain)) === 'shutoff', { timeoutMs: 30_000, intervalMs: 200, what: `${domain} shut off` });
    const acpiOffMs = Date.now() - offStart;
    expect(await readFile(serial, 'utf8')).toMatch(/VMKEEPER-GUEST POWER BUTTON: poweroff/);
    console.log(`save/restore (96 MiB TCG guest): save ${saveMs} ms, file ${(size / 1048576).toFixed(1)} MiB, restore ${restoreMs} ms, ` +
      `ACPI off after restore ${acpiOffMs} ms; counter ${lastBefore.n} -> ${after.ticks.at(-1)!.n}, serial log ${afterText.startsWith(beforeText) ? 'appended' : 'started anew'}`);

    // A save that never finished: libvirt writes the header as "LibvirtQemudPart" and turns it
    // into "LibvirtQemudSave" only at the end. Put the file back into that state: no restore.
    const fh = await open(file, 'r+');
    const magic = Buffer.alloc(16);
    await fh.read(magic, 0, 16, 0);
    expect(magic.toString('latin1')).toBe('LibvirtQemudSave');
    await fh.write(Buffer.from('LibvirtQemudPart', 'latin1'), 0, 16, 0);
    await fh.close();
    const refused = await hv.restoreDomain(file, 60_000).then(() => undefined, (e: unknown) => e);
    expect(String(refused)).toMatch(/incomplete|unfinished|corrupt/i);
    expect(await hv.domainState(domain)).toBe('shutoff');
    await hv.undefineDomain(domain);
  }, 180_000);
});
