import { randomUUID } from 'node:crypto';
import { rm } from 'node:fs/promises';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { DomainDescription, Hypervisor } from '../../src/hypervisor/port.js';
import { domainNameFor } from '../../src/machine/names.js';

// The behaviour every Hypervisor must share, run against the fake and against libvirt's test
// driver so the fake cannot drift from the real thing.

export interface HypervisorUnderTest {
  hv: Hypervisor;
  cleanup(): Promise<void>;
}

export function descriptionFor(machineName: string, domainName = domainNameFor(machineName)): DomainDescription {
  return {
    domainName,
    uuid: randomUUID(),
    machineName,
    domainType: 'qemu',
    cpus: 1,
    memoryMiB: 64,
    boot: { kernel: '/var/lib/vmkeeper/images/vmlinuz', cmdline: 'console=ttyS0' },
    diskFiles: [],
    nics: [],
    serialLogFile: `/tmp/vmkeeper-contract-${machineName}.log`,
    createdAt: 0,
  };
}

export function runHypervisorContract(name: string, makeHypervisor: () => Promise<HypervisorUnderTest>): void {
  describe(`Hypervisor contract: ${name}`, () => {
    let under: HypervisorUnderTest;
    let hv: Hypervisor;

    beforeEach(async () => {
      under = await makeHypervisor();
      hv = under.hv;
      await hv.connect();
    });
    afterEach(async () => {
      await under.cleanup();
    });

    const stateOf = async (domain: string) => (await hv.listDomains()).find((d) => d.name === domain)?.state;

    it('connects', () => {
      expect(hv.isConnected()).toBe(true);
    });

    it('walks define -> start -> shutdown -> start -> destroy, with listDomains tracking state', async () => {
      const def = descriptionFor('web-1');
      expect(await hv.defineDomain(def)).toBe(def.uuid);
      expect(await hv.listDomains()).toEqual([{ name: def.domainName, state: 'shutoff' }]);
      expect(await hv.domainState(def.domainName)).toBe('shutoff');

      await hv.startDomain(def.domainName);
      expect(await stateOf(def.domainName)).toBe('running');
      expect(await hv.domainState(def.domainName)).toBe('running');

      await hv.shutdownDomain(def.domainName);
      expect(await stateOf(def.domainName)).toBe('shutoff');

      await hv.startDomain(def.domainName);
      expect(await stateOf(def.domainName)).toBe('running');
      await hv.destroyDomain(def.domainName);
      expect(await stateOf(def.domainName)).toBe('shutoff');
    });

    it('lists the active domains carrying the prefix by name, and no shut-off one', async () => {
      const running = descriptionFor('up');
      const off = descriptionFor('down');
      await hv.defineDomain(running);
      await hv.defineDomain(off);
      expect(await hv.listActiveDomainNames()).toEqual([]);
      await hv.startDomain(running.domainName);
      expect(await hv.listActiveDomainNames()).toEqual([running.domainName]);
      await hv.destroyDomain(running.domainName);
      expect(await hv.listActiveDomainNames()).toEqual([]);
    });

    it('counts a second start as done', async () => {
      const def = descriptionFor('twice');
      await hv.defineDomain(def);
      await hv.startDomain(def.domainName);
      await expect(hv.startDomain(def.domainName)).resolves.toBeUndefined();
      expect(await stateOf(def.domainName)).toBe('running');
    });

    it('counts shutdown and destroy of a shut-off domain as done', async () => {
      const def = descriptionFor('off');
      await hv.defineDomain(def);
      await expect(hv.shutdownDomain(def.domainName)).resolves.toBeUndefined();
      await expect(hv.destroyDomain(def.domainName)).resolves.toBeUndefined();
    });

    it.each(['shutdownDomain', 'destroyDomain', 'undefineDomain'] as const)('counts %s of a missing domain as done', async (op) => {
      await expect(hv[op](domainNameFor('missing'))).resolves.toBeUndefined();
    });

    it('rejects starting a missing domain', async () => {
      await expect(hv.startDomain(domainNameFor('missing'))).rejects.toThrow(/not found/i);
    });

    it('removes an undefined domain from the list', async () => {
      const def = descriptionFor('gone');
      await hv.defineDomain(def);
      await hv.undefineDomain(def.domainName);
      expect(await hv.listDomains()).toEqual([]);
      expect(await hv.domainState(def.domainName)).toBeUndefined();
    });

    it('redefines a domain in place', async () => {
      const def = descriptionFor('again');
      await hv.defineDomain(def);
      expect(await hv.defineDomain(def)).toBe(def.uuid);
      expect((await hv.listDomains()).map((d) => d.name)).toEqual([def.domainName]);
    });

    it('lists only domains carrying the prefix', async () => {
      const ours = descriptionFor('mine');
      await hv.defineDomain(ours);
      await hv.defineDomain(descriptionFor('theirs', 'host-database'));
      expect((await hv.listDomains()).map((d) => d.name)).toEqual([ours.domainName]);
    });

    it('returns the identity of our domain with the mark, and undefined for a missing one', async () => {
      const def = descriptionFor('mark');
      await hv.defineDomain(def);
      const identity = await hv.domainIdentity(def.domainName);
      expect(identity).toEqual({ uuid: def.uuid, machineName: 'mark' });
      expect(identity?.machineName).not.toBe('other');
      expect(await hv.domainIdentity(domainNameFor('missing'))).toBeUndefined();
    });

    it('marks a redefined domain for the machine of the latest description', async () => {
      const def = descriptionFor('first');
      await hv.defineDomain(def);
      await hv.defineDomain({ ...def, machineName: 'second' });
      expect(await hv.domainIdentity(def.domainName)).toEqual({ uuid: def.uuid, machineName: 'second' });
    });
    it('saves a running guest to a file (domain off, still defined) and restores it from there', async () => {
      const def = descriptionFor('saved');
      await hv.defineDomain(def);
      await hv.startDomain(def.domainName);
      const file = `/tmp/vmkeeper-contract-saved-${randomUUID()}.state`;
      try {
        await hv.saveDomain(def.domainName, file, 10_000);
        expect(await stateOf(def.domainName)).toBe('shutoff');
        await hv.restoreDomain(file, 10_000);
        expect(await stateOf(def.domainName)).toBe('running');
      } finally {
        await rm(file, { force: true });
      }
    });

    it('refuses to save a shut-off domain and to restore from a file that holds no saved state', async () => {
      const def = descriptionFor('unsaved');
      await hv.defineDomain(def);
      const file = `/tmp/vmkeeper-contract-unsaved-${randomUUID()}.state`;
      await expect(hv.saveDomain(def.domainName, file, 10_000)).rejects.toThrow();
      await expect(hv.restoreDomain(file, 10_000)).rejects.toThrow();
      expect(await stateOf(def.domainName)).toBe('shutoff');
    });
  });
}
