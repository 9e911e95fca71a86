import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { LibvirtHypervisor } from '../../../src/hypervisor/libvirt/libvirt-hypervisor.js';
import type { DomainEventListener } from '../../../src/hypervisor/port.js';
import { systemClock } from '../../../src/lifecycle/clock.js';
import { silentLogger } from '../../../src/logging/logger.js';
import { descriptionFor } from '../../contract/hypervisor-contract.js';
import { LIBVIRT_CACHE_DIR } from '../../support/guest-images.js';
import { startLibvirtd } from '../../support/libvirtd.js';
import { waitFor } from '../../support/wait.js';

// Domain events through the agent's own addon (native/domain-events.c), from real libvirt: the
// in-process test driver's shared test:///default, and a private libvirtd that goes away.

function recorder() {
  const names: string[] = [];
  const lost: string[] = [];
  const listener: DomainEventListener = { onDomainEvent: (n) => void names.push(n), onEventsLost: (r) => void lost.push(r) };
  return { names, lost, listener };
}

const hypervisor = (uri: string) => new LibvirtHypervisor({ uri, callTimeoutMs: 10_000, logger: silentLogger, clock: systemClock });

describe('domain events on test:///default', () => {
  it('tells of define, start, stop and undefine of our domains, not of others, and nothing after close', async () => {
    const hv = hypervisor('test:///default');
    await hv.connect();
    const first = recorder();
    const second = recorder();
    const watch = await hv.watchDomainEvents(first.listener);
    const ours = descriptionFor('events-1');
    const foreign = descriptionFor('events-2', 'not-ours-events');
    try {
      await hv.defineDomain(foreign);
      await hv.startDomain(foreign.domainName);
      await hv.defineDomain(ours);
      await hv.startDomain(ours.domainName);
      await hv.destroyDomain(ours.domainName);
      // Events come in order: once the last of ours is in, the foreign ones would have been too.
      await waitFor(() => first.names.length >= 3, { timeoutMs: 10_000, what: 'define, start and stop events' });
      expect(first.names.every((n) => n === ours.domainName)).toBe(true);

      const watch2 = await hv.watchDomainEvents(second.listener);
      await watch.close();
      const before = first.names.length;
      await hv.undefineDomain(ours.domainName);
      await waitFor(() => second.names.includes(ours.domainName), { timeoutMs: 10_000, what: 'the undefine event' });
      expect(first.names.length).toBe(before);
      await watch2.close();
      expect(first.lost).toEqual([]);
    } finally {
      await hv.destroyDomain(foreign.domainName);
      await hv.undefineDomain(foreign.domainName);
      await hv.undefineDomain(ours.domainName);
      await hv.close();
    }
  });

  it('refuses a test:///<file> URI, whose connections each have domains of their own', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'vmk-events-'));
    const node = path.join(dir, 'node.xml');
    await writeFile(node, '<node/>\n');
    try {
      await expect(hypervisor(`test://${node}`).watchDomainEvents(recorder().listener)).rejects.toThrow(/domains of its own/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

const canRunLibvirtd = process.getuid?.() === 0 && existsSync('/usr/sbin/libvirtd') && existsSync('/usr/bin/qemu-system-x86_64');

describe.skipIf(!canRunLibvirtd)('domain events from a private libvirtd', () => {
  it('tells of a define and undefine, and that the events ended when libvirtd stops', async () => {
    const runDir = await mkdtemp(path.join(os.tmpdir(), 'vmk-ev-'));
    const daemon = await startLibvirtd({ runDir, cacheDir: LIBVIRT_CACHE_DIR });
    const hv = hypervisor(daemon.uri);
    const events = recorder();
    try {
      await hv.connect();
      const watch = await hv.watchDomainEvents(events.listener);
      const def = descriptionFor('events-3');
      await hv.defineDomain(def);
      await hv.undefineDomain(def.domainName);
      await waitFor(() => events.names.length >= 2, { timeoutMs: 10_000, what: 'define and undefine events' });
      expect(new Set(events.names)).toEqual(new Set([def.domainName]));

      await daemon.stop();
      await waitFor(() => events.lost.length > 0, { timeoutMs: 20_000, what: 'the end of the events' });
      expect(events.lost).toHaveLength(1);
      expect(events.lost[0]).toMatch(/libvirt closed the event connection/);
      await watch.close();
    } finally {
      await hv.close();
      await daemon.stop();
      await rm(runDir, { recursive: true, force: true });
    }
  }, 120_000);
});
