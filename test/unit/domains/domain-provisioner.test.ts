import { describe, expect, it } from 'vitest';
import { DomainProvisioner } from '../../../src/domains/domain-provisioner.js';
import { FakeDiskProvisioner } from '../../support/fakes/fake-disks.js';
import { FakeHypervisor } from '../../support/fakes/fake-hypervisor.js';
import { makeRecord } from '../../support/records.js';

const STATE = '/state';

async function defineFrom(record: ReturnType<typeof makeRecord>) {
  const hv = new FakeHypervisor();
  const disks = new FakeDiskProvisioner();
  await new DomainProvisioner(hv, disks, STATE).define(record);
  return { description: hv.descriptionOf(record.domainName), disks };
}

describe('DomainProvisioner describes the record to the hypervisor', () => {
  const record = makeRecord('web-1', {
    annotations: { owner: 'team-a' },
    spec: {
      cpus: 2,
      memoryMiB: 256,
      domainType: 'kvm',
      boot: { kernel: '/img/vmlinuz', cmdline: 'console=ttyS0' },
      disks: [{ name: 'root', image: '/img/debian.qcow2' }, { name: 'data', sizeGiB: 4 }],
      nics: [{ name: 'eth0', network: 'default' }, { name: 'eth1', bridge: 'br0' }],
      power: 'on',
    },
  });

  it('one created file per spec disk, in spec order, and the machine fields', async () => {
    const { description, disks } = await defineFrom(record);
    expect(description).toEqual({
      domainName: 'vmkeeper-web-1',
      uuid: record.uuid,
      machineName: 'web-1',
      domainType: 'kvm',
      cpus: 2,
      memoryMiB: 256,
      boot: { kernel: '/img/vmlinuz', cmdline: 'console=ttyS0' },
      diskFiles: ['/state/guests/web-1/disk-root.qcow2', '/state/guests/web-1/disk-data.qcow2'],
      nics: [{ network: 'default' }, { bridge: 'br0' }],
      serialLogFile: '/state/guests/web-1/serial.log',
      createdAt: record.createdAt,
    });
    expect([...disks.created]).toEqual(description!.diskFiles);
  });

  it('carries no annotations (they change without a redefine) and no boot when the spec has none', async () => {
    const { description } = await defineFrom({ ...record, spec: { ...record.spec, boot: undefined } });
    expect(JSON.stringify(description)).not.toContain('team-a');
    expect(description).not.toHaveProperty('boot');
  });
});
