import { describe, expect, it } from 'vitest';
import { MachineInterface } from '../../../src/dbus/machine-interface.js';
import { ManagerInterface } from '../../../src/dbus/manager-interface.js';
import { answerFor, type Answer, type ExportedInterface, type IncomingCall, type ObjectDirectory } from '../../../src/dbus/standard-answers.js';

const MANAGER = 'org.vmkeeper1.Manager';
const MACHINE = 'org.vmkeeper1.Machine';
const PROPS = 'org.freedesktop.DBus.Properties';
const WEB1 = '/org/vmkeeper1/machine/web_2d1';

const directory: ObjectDirectory = {
  interfacesAt: (path): Record<string, ExportedInterface> | undefined => {
    if (path === '/org/vmkeeper1') return { [MANAGER]: { memberTable: ManagerInterface.prototype.memberTable, values: { Version: '1.2.3' } } };
    if (path === WEB1) return { [MACHINE]: { memberTable: MachineInterface.prototype.memberTable, values: {} } };
    return undefined;
  },
  hasChildren: (path) => path === '/' || path === '/org' || path === '/org/vmkeeper1/machine',
};

const errorOf = (call: IncomingCall): string | undefined => {
  const answer: Answer | undefined = answerFor(call, directory);
  return answer && 'error' in answer ? answer.error : undefined;
};
const E = (name: string) => `org.freedesktop.DBus.Error.${name}`;

describe('answerFor: the standard errors, as sd-bus names them', () => {
  it('leaves well-formed calls to exported members to dbus-next', () => {
    expect(answerFor({ path: '/org/vmkeeper1', interface: MANAGER, member: 'GetMachine', signature: 's' }, directory)).toBeUndefined();
    expect(answerFor({ path: WEB1, interface: PROPS, member: 'Get', signature: 'ss', body: [MACHINE, 'State'] }, directory)).toBeUndefined();
    expect(answerFor({ path: WEB1, interface: PROPS, member: 'GetAll', signature: 's', body: [MACHINE] }, directory)).toBeUndefined();
    expect(answerFor({ path: '/org', interface: 'org.freedesktop.DBus.Introspectable', member: 'Introspect', signature: '' }, directory)).toBeUndefined();
    expect(answerFor({ path: '/nowhere', interface: 'org.freedesktop.DBus.Peer', member: 'Ping', signature: '' }, directory)).toBeUndefined();
  });

  it('names unknown objects, interfaces and methods', () => {
    expect(errorOf({ path: '/org/vmkeeper1/machine/nope', interface: MACHINE, member: 'Describe', signature: '' })).toBe(E('UnknownObject'));
    expect(errorOf({ path: '/nowhere', interface: 'org.freedesktop.DBus.Introspectable', member: 'Introspect', signature: '' })).toBe(E('UnknownObject'));
    expect(errorOf({ path: '/org/vmkeeper1', interface: MACHINE, member: 'Describe', signature: '' })).toBe(E('UnknownInterface'));
    expect(errorOf({ path: '/org/vmkeeper1', interface: MANAGER, member: 'Nope', signature: '' })).toBe(E('UnknownMethod'));
    expect(errorOf({ path: '/org/vmkeeper1', interface: PROPS, member: 'Nope', signature: '' })).toBe(E('UnknownMethod'));
  });

  it('answers InvalidArgs for a known method with another signature, also with an empty body', () => {
    expect(errorOf({ path: '/org/vmkeeper1', interface: MANAGER, member: 'GetMachine', signature: '' })).toBe(E('InvalidArgs'));
    expect(errorOf({ path: '/org/vmkeeper1', interface: PROPS, member: 'GetAll', signature: '' })).toBe(E('InvalidArgs'));
    expect(errorOf({ path: WEB1, interface: 'org.freedesktop.DBus.Peer', member: 'Ping', signature: 's' })).toBe(E('InvalidArgs'));
  });

  it('names property faults the same way for Get, GetAll and Set', () => {
    const props = (member: string, signature: string, body: unknown[]) => errorOf({ path: WEB1, interface: PROPS, member, signature, body });
    expect(props('GetAll', 's', ['org.nope'])).toBe(E('UnknownInterface'));
    expect(props('Get', 'ss', ['org.nope', 'State'])).toBe(E('UnknownInterface'));
    expect(props('Get', 'ss', [MACHINE, 'Nope'])).toBe(E('UnknownProperty'));
    expect(props('Set', 'ssv', [MACHINE, 'Nope', 1])).toBe(E('UnknownProperty'));
    expect(props('Set', 'ssv', [MACHINE, 'State', 'x'])).toBe(E('PropertyReadOnly'));
    expect(props('Get', 'ss', ['org.freedesktop.DBus.Peer', 'X'])).toBe(E('UnknownProperty'));
  });

  it('looks a property up on every interface when Get names none', () => {
    const answer = answerFor({ path: '/org/vmkeeper1', interface: PROPS, member: 'Get', signature: 'ss', body: ['', 'Version'] }, directory);
    expect(answer && 'reply' in answer ? answer.reply.body[0] : undefined).toMatchObject({ signature: 's', value: '1.2.3' });
  });
});
