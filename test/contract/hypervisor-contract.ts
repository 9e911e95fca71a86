import { randomUUID } from 'node:crypto';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { buildDomainXml, isOurDomainXml } from '../../src/hypervisor/domain-xml.js';
import type { DomainDefinition, Hypervisor } from '../../src/hypervisor/port.js';
import { domainNameFor } from '../../src/machine/names.js';
import type { MachineSpec } from '../../src/machine/spec.js';

// The behaviour every Hypervisor must share, run against the fake and against libvirt's test
// driver so the fake cannot drift from the real thing.

export interface HypervisorUnderTest {
  hv: Hypervisor;
  cleanup(): Promise<void>;
}

const spec: MachineSpec = {
  cpus: 1,
  memoryMiB: 64,
  domainType: 'qemu',
  boot: { kernel: '/var/lib/vmkeeper/images/vmlinuz', cmdline: 'console=ttyS0' },
  disks: [],
  nics: [],
  power: 'on',
  annotations: {},
};

export function definitionFor(machineName: string, domainName = domainNameFor(machineName)): DomainDefinition {
  const uuid = randomUUID();
  const xml = buildDomainXml({ domainName, uuid, machineName, spec, disks: [], serialLogFile: `/tmp/vmkeeper-contract-${machineName}.log`, createdAt: 0 });
  return { name: domainName, uuid, xml };
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
      const def = definitionFor('web-1');
      expect(await hv.defineDomain(def)).toBe(def.uuid);
      expect(await hv.listDomains()).toEqual([{ name: def.name, state: 'shutoff' }]);
      expect(await hv.domainState(def.name)).toBe('shutoff');

      await hv.startDomain(def.name);
      expect(await stateOf(def.name)).toBe('running');
      expect(await hv.domainState(def.name)).toBe('running');

      await hv.shutdownDomain(def.name);
      expect(await stateOf(def.name)).toBe('shutoff');

      await hv.startDomain(def.name);
      expect(await stateOf(def.name)).toBe('running');
      await hv.destroyDomain(def.name);
      expect(await stateOf(def.name)).toBe('shutoff');
    });

    it('counts a second start as done', async () => {
      const def = definitionFor('twice');
      await hv.defineDomain(def);
      await hv.startDomain(def.name);
      await expect(hv.startDomain(def.name)).resolves.toBeUndefined();
      expect(await stateOf(def.name)).toBe('running');
    });

    it('counts shutdown and destroy of a shut-off domain as done', async () => {
      const def = definitionFor('off');
      await hv.defineDomain(def);
      await expect(hv.shutdownDomain(def.name)).resolves.toBeUndefined();
      await expect(hv.destroyDomain(def.name)).resolves.toBeUndefined();
    });

    it.each(['shutdownDomain', 'destroyDomain', 'undefineDomain'] as const)('counts %s of a missing domain as done', async (op) => {
      await expect(hv[op](domainNameFor('missing'))).resolves.toBeUndefined();
    });

    it('rejects starting a missing domain', async () => {
      await expect(hv.startDomain(domainNameFor('missing'))).rejects.toThrow(/not found/i);
    });

    it('removes an undefined domain from the list', async () => {
      const def = definitionFor('gone');
      await hv.defineDomain(def);
      await hv.undefineDomain(def.name);
      expect(await hv.listDomains()).toEqual([]);
      expect(await hv.domainState(def.name)).toBeUndefined();
    });

    it('redefines a domain in place', async () => {
      const def = definitionFor('again');
      await hv.defineDomain(def);
      expect(await hv.defineDomain(def)).toBe(def.uuid);
      expect((await hv.listDomains()).map((d) => d.name)).toEqual([def.name]);
    });

    it('lists only domains carrying the prefix', async () => {
      const ours = definitionFor('mine');
      await hv.defineDomain(ours);
      await hv.defineDomain(definitionFor('theirs', 'host-database'));
      expect((await hv.listDomains()).map((d) => d.name)).toEqual([ours.name]);
    });

    it('returns the XML of our domain with the marker, and undefined for a missing one', async () => {
      const def = definitionFor('xml');
      await hv.defineDomain(def);
      const xml = await hv.domainXml(def.name);
      expect(xml).toBeDefined();
      expect(isOurDomainXml(xml!, 'xml')).toBe(true);
      expect(isOurDomainXml(xml!, 'other')).toBe(false);
      expect(await hv.domainXml(domainNameFor('missing'))).toBeUndefined();
    });
  });
}
