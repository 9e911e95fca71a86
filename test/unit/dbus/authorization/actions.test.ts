import { describe, expect, it } from 'vitest';
import { ALL_ACTIONS, actionFor } from '../../../../src/dbus/authorization/actions.js';
import { MACHINE_INTERFACE, MachineInterface } from '../../../../src/dbus/machine-interface.js';
import { MANAGER_INTERFACE, ManagerInterface } from '../../../../src/dbus/manager-interface.js';

// Every method is either a read (open to all) or mapped to an action: a new mutating member that
// nobody listed would otherwise skip polkit.

const READS = new Set([
  'org.vmkeeper1.Manager.GetMachine',
  'org.vmkeeper1.Manager.ListMachines',
  'org.vmkeeper1.Manager.DescribeMachine',
  'org.vmkeeper1.Manager.DescribeMachineStructured',
  'org.vmkeeper1.Manager.ListEvents',
  'org.vmkeeper1.Manager.ListEventsSince',
  'org.vmkeeper1.Manager.ListShutdownRecords',
  'org.vmkeeper1.Manager.DescribeShutdownRecord',
  'org.vmkeeper1.Machine.Describe',
  'org.vmkeeper1.Machine.DescribeStructured',
]);

const members = [
  ...Object.keys(ManagerInterface.prototype.memberTable.methods).map((m) => [MANAGER_INTERFACE, m] as const),
  ...Object.keys(MachineInterface.prototype.memberTable.methods).map((m) => [MACHINE_INTERFACE, m] as const),
];

describe('actionFor', () => {
  it.each(members)('%s.%s is a read or needs an action, never neither', (iface, member) => {
    const action = actionFor(iface, member);
    if (READS.has(`${iface}.${member}`)) expect(action).toBeUndefined();
    else expect(ALL_ACTIONS).toContain(action);
  });

  it('maps the version-checked writes to the same actions as the plain ones', () => {
    expect(actionFor(MANAGER_INTERFACE, 'SetMachinePowerIfVersion')).toBe(actionFor(MANAGER_INTERFACE, 'SetMachinePower'));
    expect(actionFor(MANAGER_INTERFACE, 'DeleteMachineIfVersion')).toBe(actionFor(MANAGER_INTERFACE, 'DeleteMachine'));
    expect(actionFor(MANAGER_INTERFACE, 'SetMachineAnnotationsIfVersion')).toBe(actionFor(MANAGER_INTERFACE, 'SetMachineAnnotations'));
  });

  it('Drain and Undrain need the drain action', () => {
    expect(actionFor(MANAGER_INTERFACE, 'Drain')).toBe('org.vmkeeper1.drain');
    expect(actionFor(MANAGER_INTERFACE, 'Undrain')).toBe('org.vmkeeper1.drain');
  });

  it('knows nothing of members we do not serve, nor of inherited object keys', () => {
    expect(actionFor(MANAGER_INTERFACE, 'Nope')).toBeUndefined();
    expect(actionFor(MANAGER_INTERFACE, undefined)).toBeUndefined();
    expect(actionFor('org.vmkeeper1', 'Manager.toString')).toBeUndefined();
  });
});
