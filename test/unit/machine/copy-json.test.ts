import { describe, expect, it } from 'vitest';
import { copyJson } from '../../../src/machine/copy-json.js';
import { emptyAnnotations } from '../../../src/machine/annotations.js';
import { freezeRecord } from '../../../src/machine/record.js';
import { makeRecord } from '../../support/records.js';

describe('copyJson', () => {
  it('makes of a record what structuredClone makes of it', () => {
    const record = makeRecord('web-1', { annotations: Object.assign(emptyAnnotations(), { team: 'blue' }) });
    const copy = copyJson(record);
    expect(copy).toStrictEqual(structuredClone(record));
    expect(Object.getPrototypeOf(copy.annotations)).toBe(Object.prototype);
  });

  it('shares nothing with the original, and a frozen stored record comes out mutable', () => {
    const record = freezeRecord(makeRecord('web-1'));
    const copy = copyJson(record);
    copy.spec.disks[0]!.sizeGiB = 99;
    copy.annotations.owner = 'changed';
    copy.status.state = 'running';
    expect(record.spec.disks[0]!.sizeGiB).toBe(1);
    expect(record.annotations.owner).toBe('test');
    expect(record.status.state).toBe('pending');
  });

  it('keeps undefined properties, nulls, arrays and primitives as they are', () => {
    const value = { a: undefined, b: null, c: [1, 'x', [true, null]], d: 0, e: '' };
    const copy = copyJson(value);
    expect(copy).toStrictEqual(value);
    expect(Object.hasOwn(copy, 'a')).toBe(true);
    expect(copy.c).not.toBe(value.c);
    expect(copyJson(7)).toBe(7);
    expect(copyJson(null)).toBeNull();
  });

  it('keeps a "__proto__" key as an own key, never as the prototype', () => {
    const parsed = JSON.parse('{"__proto__": {"polluted": true}, "x": 1}') as Record<string, unknown>;
    const copy = copyJson(parsed);
    expect(Object.getPrototypeOf(copy)).toBe(Object.prototype);
    expect(Object.hasOwn(copy, '__proto__')).toBe(true);
    expect(copy['__proto__']).toEqual({ polluted: true });
    expect((copy as { polluted?: boolean }).polluted).toBeUndefined();
  });
});
