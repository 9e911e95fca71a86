import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { LibvirtHypervisor } from '../../../src/hypervisor/libvirt/libvirt-hypervisor.js';
import { systemClock } from '../../../src/lifecycle/clock.js';
import { silentLogger } from '../../../src/logging/logger.js';
import { isAgentError } from '../../../src/machine/errors.js';
import { LIBVIRT_CACHE_DIR } from '../../support/guest-images.js';
import { startLibvirtd } from '../../support/libvirtd.js';

// A real (private) libvirtd that dies and comes back: the adapter must report the loss as
// HypervisorUnavailable and reconnect by itself on a later call.
const canRunLibvirtd = process.getuid?.() === 0 && existsSync('/usr/sbin/libvirtd') && existsSync('/usr/bin/qemu-system-x86_64');

describe.skipIf(!canRunLibvirtd)('LibvirtHypervisor against a libvirtd that restarts', () => {
  it('maps the lost connection to HypervisorUnavailable and reconnects afterwards', async () => {
    const runDir = await mkdtemp(path.join(os.tmpdir(), 'vmk-lv-'));
    const opts = { runDir, cacheDir: LIBVIRT_CACHE_DIR };
    let daemon = await startLibvirtd(opts);
    const hv = new LibvirtHypervisor({ uri: daemon.uri, callTimeoutMs: 10_000, logger: silentLogger, clock: systemClock });
    try {
      await hv.connect();
      expect(await hv.listDomains()).toEqual([]);
      await daemon.stop();

      const lost = await hv.listDomains().then(() => undefined, (e: unknown) => e);
      expect(isAgentError(lost, 'HypervisorUnavailable')).toBe(true);
      expect((lost as Error).message).toMatch(/Broken pipe|End of file|client socket is closed/);
      expect(hv.isConnected()).toBe(false);

      daemon = await startLibvirtd(opts);
      expect(await hv.listDomains()).toEqual([]);
      expect(hv.isConnected()).toBe(true);
    } finally {
      await hv.close();
      await daemon.stop();
      await rm(runDir, { recursive: true, force: true });
    }
  }, 120_000);
});
