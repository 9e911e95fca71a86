import { describe, expect, it } from 'vitest';
import { MAX_INBOUND_BODY_BYTES, inboundJudge, methodSignatures } from '../../../src/dbus/inbound-policy.js';
import { MACHINE_INTERFACE, MachineInterface } from '../../../src/dbus/machine-interface.js';
import { MANAGER_INTERFACE, ManagerInterface } from '../../../src/dbus/manager-interface.js';

const judge = inboundJudge(
  methodSignatures({ [MANAGER_INTERFACE]: ManagerInterface.prototype.memberTable, [MACHINE_INTERFACE]: MachineInterface.prototype.memberTable }),
);
const call = (iface: string | undefined, member: string, signature: string, bodyBytes = 8) => judge({ interface: iface, member, signature, bodyBytes });

describe('inboundJudge', () => {
  it.each([
    [MANAGER_INTERFACE, 'CreateMachine', 'ss'],
    [MANAGER_INTERFACE, 'SetMachineAnnotations', 'sa{ss}'],
    [MACHINE_INTERFACE, 'DeleteWithGracePeriod', 'u'],
    ['org.freedesktop.DBus.Properties', 'Get', 'ss'],
    ['org.freedesktop.DBus.Properties', 'Set', 'ssv'],
    ['org.example.Other', 'Anything', 'ay'],
    [undefined, 'GetMachine', 'u'],
  ])('lets %s.%s(%s) through', (iface, member, signature) => {
    expect(call(iface, member, signature)).toBeUndefined();
  });

  it.each([
    [MANAGER_INTERFACE, 'GetMachine', 'ay'],
    [MANAGER_INTERFACE, 'SetMachineAnnotations', 'sa{sv}'],
    [MACHINE_INTERFACE, 'SetPower', 'u'],
    ['org.freedesktop.DBus.Properties', 'Get', 'sss'],
    ['org.freedesktop.DBus.Introspectable', 'Introspect', 's'],
  ])('refuses %s.%s(%s) as InvalidArgs', (iface, member, signature) => {
    expect(call(iface, member, signature)).toMatchObject({ errorName: 'org.freedesktop.DBus.Error.InvalidArgs' });
  });

  it('refuses a body over the limit whatever it is, and takes one at the limit', () => {
    expect(call(MANAGER_INTERFACE, 'CreateMachine', 'ss', MAX_INBOUND_BODY_BYTES)).toBeUndefined();
    expect(call(MANAGER_INTERFACE, 'CreateMachine', 'ss', MAX_INBOUND_BODY_BYTES + 1)).toMatchObject({ errorName: 'org.freedesktop.DBus.Error.LimitsExceeded' });
    expect(call('org.example.Other', 'X', 'ay', MAX_INBOUND_BODY_BYTES + 1)).toMatchObject({ errorName: 'org.freedesktop.DBus.Error.LimitsExceeded' });
  });
});
