import { describe, expect, it } from 'vitest';
import { escapePathLabel, machineObjectPath, unescapePathLabel, validateMachineName } from '../../../src/machine/names.js';
import { isAgentError } from '../../../src/machine/errors.js';

describe('machine names', () => {
  it.each(['a', 'web-1', '0', 'a'.repeat(63), 'x1-y2-z3'])('accepts %s', (name) => {
    expect(validateMachineName(name)).toBe(name);
  });
  it.each(['', 'A', '-a', 'a-', 'a_b', 'a/b', '..', 'a.b', 'a'.repeat(64), 'wéb', 'a b', 'a\u0000b'])('rejects %j as InvalidName', (name) => {
    let caught: unknown;
    try {
      validateMachineName(name);
    } catch (err) {
      caught = err;
    }
    expect(isAgentError(caught, 'InvalidName')).toBe(true);
  });
  it('rejects non-strings', () => {
    expect(() => validateMachineName(42)).toThrow(/must be a string/);
  });
});

describe('object path escaping (systemd bus_label_escape)', () => {
  it.each([
    ['web-1', 'web_2d1'],
    ['abc', 'abc'],
    ['a.b', 'a_2eb'],
    ['', '_'],
    ['é', '_c3_a9'],
    ['1web', '_31web'],
    ['0', '_30'],
    ['a1', 'a1'],
  ])('%j -> %s', (label, escaped) => {
    expect(escapePathLabel(label)).toBe(escaped);
    expect(unescapePathLabel(escaped)).toBe(label);
  });
  it('builds machine object paths', () => {
    expect(machineObjectPath('web-1')).toBe('/org/vmkeeper1/machine/web_2d1');
  });
  it('escapes a leading digit as sd_bus_path_encode does (1web is at _31web)', () => {
    expect(machineObjectPath('1web')).toBe('/org/vmkeeper1/machine/_31web');
  });
});
