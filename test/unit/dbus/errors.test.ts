import { DBusError } from 'dbus-next';
import { describe, expect, it } from 'vitest';
import { DBUS_ERROR_FAILED, mapErrors, toDBusError } from '../../../src/dbus/errors.js';
import { AgentError, type AgentErrorKind } from '../../../src/machine/errors.js';

const kinds: AgentErrorKind[] = [
  'NoSuchMachine',
  'MachineExists',
  'InvalidName',
  'InvalidSpec',
  'MachineTerminating',
  'ShuttingDown',
  'HypervisorUnavailable',
  'StorageFailure',
];

describe('toDBusError', () => {
  it.each(kinds)('maps AgentError(%s) to org.vmkeeper1.Error.%s', (kind) => {
    const mapped = toDBusError(new AgentError(kind, `something about ${kind}`));
    expect(mapped).toBeInstanceOf(DBusError);
    expect(mapped.type).toBe(`org.vmkeeper1.Error.${kind}`);
    expect(mapped.text).toBe(`something about ${kind}`);
  });

  it.each<[AgentErrorKind, string]>([
    ['InvalidArgument', 'org.freedesktop.DBus.Error.InvalidArgs'],
    ['NotSupported', 'org.freedesktop.DBus.Error.NotSupported'],
  ])('maps AgentError(%s), outside the contract, to the standard %s', (kind, name) => {
    expect(toDBusError(new AgentError(kind, 'x')).type).toBe(name);
  });

  it.each([
    ['an Error with a stack', new Error('disk on fire'), 'disk on fire'],
    ['a multi-line message', new Error('first line\nsecond line\n    at x (y.js:1:1)'), 'first line'],
    ['a TypeError', new TypeError("Cannot read properties of undefined (reading 'x')"), "Cannot read properties of undefined (reading 'x')"],
    ['a string', 'plain text', 'plain text'],
    ['undefined', undefined, 'undefined'],
    ['an empty message', new Error(''), 'unknown error'],
  ])('maps %s to Failed with one line', (_, err, text) => {
    const mapped = toDBusError(err);
    expect(mapped.type).toBe(DBUS_ERROR_FAILED);
    expect(mapped.text).toBe(text);
    expect(mapped.text).not.toContain('\n');
    expect(mapped.text).not.toMatch(/\bat .*:\d+:\d+/);
  });

  it('keeps the name of a DBusError but only its first line', () => {
    const mapped = toDBusError(new DBusError('org.freedesktop.DBus.Error.InvalidArgs', 'bad\nmore'));
    expect(mapped.type).toBe('org.freedesktop.DBus.Error.InvalidArgs');
    expect(mapped.text).toBe('bad');
  });

  it('keeps AgentError messages to one line and bounded length', () => {
    const mapped = toDBusError(new AgentError('InvalidSpec', `${'x'.repeat(5000)}\nsecond`));
    expect(mapped.text).not.toContain('\n');
    expect(mapped.text.length).toBeLessThanOrEqual(1003);
  });
});

describe('mapErrors', () => {
  it('passes results through', async () => {
    await expect(mapErrors(() => 42)).resolves.toBe(42);
    await expect(mapErrors(async () => 'ok')).resolves.toBe('ok');
  });

  it('maps synchronous and asynchronous failures', async () => {
    await expect(mapErrors(() => {
      throw new AgentError('NoSuchMachine', 'gone');
    })).rejects.toMatchObject({ type: 'org.vmkeeper1.Error.NoSuchMachine', text: 'gone' });
    await expect(mapErrors(async () => {
      throw new RangeError('x\ny');
    })).rejects.toMatchObject({ type: DBUS_ERROR_FAILED, text: 'x', name: 'DBusError' });
  });
});
