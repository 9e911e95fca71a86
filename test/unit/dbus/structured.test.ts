import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { MachineInterface } from '../../../src/dbus/machine-interface.js';
import { ManagerInterface } from '../../../src/dbus/manager-interface.js';
import { emitsChangedSignal } from '../../../src/dbus/property-annotations.js';
import { describeStructured } from '../../../src/dbus/structured.js';
import { newStatus, type MachineRecord } from '../../../src/machine/record.js';
import { PROJECT_ROOT } from '../../support/dbus-daemon.js';
import { emitsChangedAnnotations } from '../../support/introspection.js';

function record(over: Partial<MachineRecord> = {}): MachineRecord {
  return {
    apiVersion: 'vmkeeper/v2',
    name: 'web-1',
    uuid: '2bc75166-6e80-4bca-a345-840995b6cb95',
    domainName: 'vmkeeper-web-1',
    createdAt: 1_767_225_600_123,
    deletionTimestamp: 0,
    deletionGracePeriodSec: 0,
    resourceVersion: 3,
    annotations: { owner: 'team-a' },
    spec: { cpus: 2, memoryMiB: 512, domainType: 'kvm', disks: [{ name: 'root', sizeGiB: 1 }], nics: [], power: 'on' },
    status: newStatus(),
    ...over,
  } as MachineRecord;
}

describe('describeStructured', () => {
  it('types timestamps as t microseconds and leaves absent values out', () => {
    const d = describeStructured(record());
    const metadata = d.metadata!.value as Record<string, { signature: string; value: unknown }>;
    expect(metadata.createdAt).toMatchObject({ signature: 't', value: 1_767_225_600_123_000n });
    expect(metadata).not.toHaveProperty('deletionTimestamp');
    expect(metadata).not.toHaveProperty('deletionGracePeriodSec');
    expect(metadata.annotations).toMatchObject({ signature: 'a{ss}', value: { owner: 'team-a' } });
    const status = d.status!.value as Record<string, unknown>;
    expect(status).not.toHaveProperty('forceStopAt');
    expect(status).not.toHaveProperty('message');
    const spec = d.spec!.value as Record<string, { signature: string; value: unknown }>;
    expect(spec.cpus).toMatchObject({ signature: 'u', value: 2 });
    expect(spec.disks!.signature).toBe('aa{sv}');
    expect(spec.nics).toMatchObject({ signature: 'aa{sv}', value: [] });
  });

  it('carries the deletion once there is one', () => {
    const metadata = describeStructured(record({ deletionTimestamp: 2_000, deletionGracePeriodSec: 30 })).metadata!.value as Record<string, unknown>;
    expect(metadata.deletionTimestamp).toMatchObject({ signature: 't', value: 2_000_000n });
    expect(metadata.deletionGracePeriodSec).toMatchObject({ signature: 'u', value: 30 });
  });
});

describe('EmitsChangedSignal in the introspection XML', () => {
  it('matches what the interfaces declare, for every property', async () => {
    for (const [file, iface, table] of [
      ['org.vmkeeper1.Machine.xml', 'org.vmkeeper1.Machine', MachineInterface.prototype.memberTable],
      ['org.vmkeeper1.Manager.xml', 'org.vmkeeper1.Manager', ManagerInterface.prototype.memberTable],
    ] as const) {
      const xml = await readFile(path.join(PROJECT_ROOT, 'src/dbus/introspection', file), 'utf8');
      const declared = emitsChangedAnnotations(xml)[iface]!;
      expect(Object.keys(declared).sort()).toEqual(Object.keys(table.properties).sort());
      for (const [name, value] of Object.entries(declared)) expect([name, value]).toEqual([name, emitsChangedSignal(iface, name)]);
    }
    expect(emitsChangedSignal('org.vmkeeper1.Machine', 'Uuid')).toBe('const');
    expect(emitsChangedSignal('org.vmkeeper1.Machine', 'State')).toBe('true');
  });
});
