import { describe, expect, it } from 'vitest';
import { sameJson } from '../../../src/machine/same-json.js';

describe('sameJson', () => {
  it('agrees with JSON.stringify on values that serialise alike or not', () => {
    const cases: Array<[unknown, unknown]> = [
      [{ a: 1, b: [1, 2, { c: 'x' }] }, { a: 1, b: [1, 2, { c: 'x' }] }],
      [{ a: 1 }, { a: 2 }],
      [{ a: 1 }, { a: 1, b: 2 }],
      [{ a: 1, b: 2 }, { a: 1 }],
      [[1, 2], [1, 2, 3]],
      [{ a: [1] }, { a: { 0: 1 } }],
      [{ a: null }, { a: 0 }],
      [{ a: '1' }, { a: 1 }],
      [{ a: { b: { c: true } } }, { a: { b: { c: false } } }],
      [[], {}],
    ];
    for (const [a, b] of cases) expect(sameJson(a, b), JSON.stringify([a, b])).toBe(JSON.stringify(a) === JSON.stringify(b));
  });

  it('treats an undefined property as absent, as JSON does', () => {
    expect(sameJson({ a: 1, gone: undefined }, { a: 1 })).toBe(true);
    expect(sameJson({ a: 1 }, { a: 1, gone: undefined })).toBe(true);
    expect(sameJson({ a: undefined }, { b: undefined })).toBe(true);
    expect(sameJson({ a: undefined }, { a: null })).toBe(false);
    expect(sameJson([undefined], [null])).toBe(true);
  });

  it('ignores key order', () => {
    expect(sameJson({ a: 1, b: 2 }, { b: 2, a: 1 })).toBe(true);
  });
});
