import { DBusError } from 'dbus-next';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { connectFailure, decodeSignal } from '../../../src/ctl/client.js';
import { eventFromTuple, machineFromProperties, partialMachine } from '../../../src/ctl/dbus-values.js';
import { CtlError, ExitCode, fromDBusError, toCtlError } from '../../../src/ctl/errors.js';
import { CTL_VERSION } from '../../../src/ctl/version.js';

describe('D-Bus error names -> exit codes and one line', () => {
  it.each<[string, string, number, string]>([
    ['org.vmkeeper1.Error.NoSuchMachine', 'no machine named "x"', 3, 'no machine named "x"'],
    ['org.vmkeeper1.Error.InvalidName', 'bad', 4, 'invalid name: bad'],
    ['org.vmkeeper1.Error.InvalidSpec', 'spec field "cpus": must be an integer', 4, 'invalid spec: spec field "cpus": must be an integer'],
    ['org.freedesktop.DBus.Error.InvalidArgs', 'grace period must be 0..x', 4, 'invalid argument: grace period must be 0..x'],
    ['org.freedesktop.DBus.Error.AccessDenied', 'Rejected send message, 3 matched rules; type="method_call"...', 5, 'access denied: changing machines needs root or membership in the vmkeeper group'],
    ['org.freedesktop.DBus.Error.AccessDenied', 'not authorized for org.vmkeeper1.set-power', 5, 'access denied by polkit: not authorized for org.vmkeeper1.set-power'],
    ['org.freedesktop.DBus.Error.AccessDenied', 'cannot check authorization for org.vmkeeper1.delete-machine with polkit, refused: x', 5, 'access denied by polkit: cannot check authorization for org.vmkeeper1.delete-machine with polkit, refused: x'],
    ['org.freedesktop.DBus.Error.AccessDenied', 'Rejected send message, 3 matched rules; type="method_call", interface="org.vmkeeper1.Manager" member="SetMachinePower" destination="org.vmkeeper1"', 5, 'access denied: changing machines needs root or membership in the vmkeeper group'],
    ['org.freedesktop.DBus.Error.ServiceUnknown', 'The name org.vmkeeper1 was not provided by any .service files', 6, 'vmkeeperd is not running (nobody owns org.vmkeeper1 on this bus)'],
    ['org.freedesktop.DBus.Error.NameHasNoOwner', 'x', 6, 'vmkeeperd is not running (nobody owns org.vmkeeper1 on this bus)'],
    ['org.vmkeeper1.Error.MachineExists', 'a machine named "x" already exists', 7, 'a machine named "x" already exists'],
    ['org.vmkeeper1.Error.MachineTerminating', 'machine "x" is being deleted', 7, 'machine "x" is being deleted'],
    ['org.vmkeeper1.Error.ShuttingDown', 'the agent is shutting down', 7, 'the agent is shutting down'],
    ['org.vmkeeper1.Error.StorageFailure', 'disk full', 1, 'storage failure (nothing was changed): disk full'],
    ['org.vmkeeper1.Error.HypervisorUnavailable', 'down', 1, 'hypervisor unavailable: down'],
    ['org.freedesktop.DBus.Error.Failed', 'boom\n    at x (y.js:1)', 1, 'boom'],
    ['org.freedesktop.DBus.Error.NoReply', 'x', 1, 'vmkeeperd did not answer in time'],
    ['com.example.Unknown', '', 1, 'com.example.Unknown'],
  ])('%s', (name, text, code, message) => {
    const e = fromDBusError(name, text);
    expect(e.exitCode).toBe(code);
    expect(e.message).toBe(message);
  });

  it('recognises dbus-next DBusErrors and keeps anything else to one line', () => {
    expect(toCtlError(new DBusError('org.vmkeeper1.Error.NoSuchMachine', 'no machine named "a"')).exitCode).toBe(ExitCode.NoSuchMachine);
    const plain = toCtlError(new Error('first\nsecond\n  at stack'));
    expect(plain).toBeInstanceOf(CtlError);
    expect(plain.message).toBe('first');
    expect(plain.exitCode).toBe(1);
    const mine = new CtlError('x', 8);
    expect(toCtlError(mine)).toBe(mine);
    expect(toCtlError({ type: 'not a dbus name' }).exitCode).toBe(1);
  });

  it('names the cause of a failed bus connection instead of the socket library text', () => {
    expect(connectFailure(new Error("cannot connect to D-Bus at unix:path=/x: ENOENT, USocket socket '../src/uwrap.cc:525'"))).toBe('no bus socket there (is dbus-daemon running?)');
    expect(connectFailure(new Error('ECONNREFUSED, x'))).toBe('connection refused (is dbus-daemon running?)');
    expect(connectFailure(new Error('cannot connect to D-Bus at system: Connection closed'))).toBe('Connection closed');
  });
});

describe('D-Bus values', () => {
  const v = (signature: string, value: unknown) => ({ signature, value });

  it('decodes machine properties (usec -> ms, bigint -> number)', () => {
    const m = machineFromProperties('/org/vmkeeper1/machine/web_2d1', {
      Name: v('s', 'web-1'),
      State: v('s', 'terminating'),
      CreatedAt: v('t', 1_700_000_000_123_456n),
      ForceStopAt: v('t', 0n),
      GracePeriodSec: v('u', 30),
      Annotations: v('a{ss}', { a: 'b' }),
      ResourceVersion: v('t', 7n),
    });
    expect(m).toMatchObject({ name: 'web-1', state: 'terminating', createdAt: 1_700_000_000_123, forceStopAt: 0, gracePeriodSec: 30, annotations: { a: 'b' }, resourceVersion: 7, path: '/org/vmkeeper1/machine/web_2d1' });
    expect(partialMachine({ State: v('s', 'stopped'), Unknown: v('s', 'x') })).toEqual({ state: 'stopped' });
  });

  it('decodes events and signals', () => {
    expect(eventFromTuple([1_000_000n, 'web-1', 'warning', 'ForceStopped', 'm'])).toEqual({ timestamp: 1000, machine: 'web-1', type: 'warning', reason: 'ForceStopped', message: 'm' });
    expect(decodeSignal({ interface: 'org.vmkeeper1.Manager', member: 'MachineRemoved', body: ['a', '/p'] })).toEqual({ kind: 'machine-removed', name: 'a', path: '/p' });
    expect(decodeSignal({ interface: 'org.freedesktop.DBus.Properties', member: 'PropertiesChanged', path: '/p', body: ['org.vmkeeper1.Machine', { State: v('s', 'running') }, []] })).toEqual({ kind: 'machine-changed', path: '/p', changed: { state: 'running' } });
    expect(decodeSignal({ interface: 'org.freedesktop.DBus.Properties', member: 'PropertiesChanged', path: '/org/vmkeeper1', body: ['org.vmkeeper1.Manager', {}, []] })).toBeUndefined();
    expect(decodeSignal({ interface: 'org.freedesktop.DBus', member: 'NameOwnerChanged', body: ['org.vmkeeper1', ':1.5', ''] })).toEqual({ kind: 'agent-gone' });
    expect(decodeSignal({ interface: 'org.freedesktop.DBus', member: 'NameOwnerChanged', body: ['org.vmkeeper1', '', ':1.6'] })).toEqual({ kind: 'agent-back' });
  });
});

describe('version', () => {
  it('matches package.json', () => {
    const pkg = JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { version: string };
    expect(CTL_VERSION).toBe(pkg.version);
  });
});
