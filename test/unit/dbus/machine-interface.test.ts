import { createRequire } from 'node:module';
import { Message, MessageType } from 'dbus-next';
import { describe, expect, it } from 'vitest';
import { MACHINE_INTERFACE, MANAGED_OBJECTS_SIGNATURE, MachineInterface } from '../../../src/dbus/machine-interface.js';
import { MarshalledArray } from '../../../src/dbus/marshalled.js';
import type { MachineApi } from '../../../src/service/api.js';
import { makeRecord } from '../../support/records.js';

const requireDbus = createRequire(import.meta.url);
const { marshallMessage } = requireDbus('dbus-next/lib/marshall-compat') as { marshallMessage(msg: Message): [Buffer, number[]] };

/** dbus-next's own bytes for this machine as the only GetManagedObjects entry, minus the array's length and padding. */
function reference(iface: MachineInterface): Buffer {
  const objects = { [iface.objectPath]: { [MACHINE_INTERFACE]: iface.variants() } };
  const msg = new Message({ type: MessageType.METHOD_RETURN, serial: 3, replySerial: 1 as unknown as string, signature: MANAGED_OBJECTS_SIGNATURE, body: [objects] });
  const [bytes] = marshallMessage(msg);
  return bytes.subarray(bytes.length - bytes.readUInt32LE(4) + 8);
}

function machine(): MachineInterface {
  const iface = new MachineInterface({} as MachineApi, 'web-1');
  iface.update(makeRecord('web-1'), 30, false);
  return iface;
}

describe('MachineInterface: its GetManagedObjects entry', () => {
  it('is byte for byte what dbus-next sends for the machine', () => {
    const iface = machine();
    expect(iface.managedElement().bytes().equals(reference(iface))).toBe(true);
  });

  it('is kept while a new record changes no property, and redone when one changes', () => {
    const iface = machine();
    const first = iface.managedElement();
    expect(iface.update(makeRecord('web-1'), 30, false)).toEqual([]);
    expect(iface.managedElement()).toBe(first);

    expect(iface.update(makeRecord('web-1', { annotations: { owner: 'ops' } }), 30, false)).toContain('Annotations');
    const second = iface.managedElement();
    expect(second).not.toBe(first);
    expect(second.bytes().equals(reference(iface))).toBe(true);
  });

  it('lets go of its stale bytes as soon as a property changes, and keeps them while none does', () => {
    const iface = machine();
    const element = iface.managedElement();
    const entry = iface.listElement();
    new MarshalledArray(MANAGED_OBJECTS_SIGNATURE, [element]);
    iface.update(makeRecord('web-1'), 30, false);
    expect(iface.managedElement()).toBe(element);
    expect(element.bytes().equals(reference(iface))).toBe(true);

    iface.update(makeRecord('web-1', { annotations: { owner: 'ops' } }), 30, false);
    expect(() => element.bytes()).toThrow(/released/);
    expect(iface.listElement()).toBe(entry);

    const base = makeRecord('web-1', { annotations: { owner: 'ops' } });
    iface.update({ ...base, status: { ...base.status, state: 'running' } }, 30, false);
    expect(() => entry.bytes()).toThrow(/released/);
  });

  it('lets go of both elements when its machine is gone', () => {
    const iface = machine();
    const element = iface.managedElement();
    const entry = iface.listElement();
    new MarshalledArray(MANAGED_OBJECTS_SIGNATURE, [element]);
    iface.releaseElements();
    expect(() => element.bytes()).toThrow(/released/);
    expect(() => entry.bytes()).toThrow(/released/);
  });
});
