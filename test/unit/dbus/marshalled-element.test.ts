import { describe, expect, it, vi } from 'vitest';
import { MarshalledArray, MarshalledElement, marshalElement } from '../../../src/dbus/marshalled.js';

const entries = Array.from({ length: 6 }, (_, i) => [`m${i}`, 'running', 'on', `/org/vmkeeper1/machine/m${i}`]);
const elements = () => entries.map((e) => marshalElement('a(ssso)', [e], e));
const inBody = (array: MarshalledArray, list: ReturnType<typeof elements>) => list.filter((e) => e.bytes().buffer === array.body.buffer).length;

describe('MarshalledElement in a shared reply body', () => {
  it('stays its copy in the body while more than half of the body is still live, then copies its bytes out', () => {
    const list = elements();
    const array = new MarshalledArray('a(ssso)', list);
    const before = list.map((e) => Buffer.from(e.bytes()));
    list[0]!.release();
    list[1]!.release();
    expect(inBody(array, list.slice(2))).toBe(4);
    list[2]!.release();
    // Three of six left: each now holds a copy of its own, and nothing points into the body.
    expect(inBody(array, list.slice(3))).toBe(0);
    for (const i of [3, 4, 5]) {
      expect(list[i]!.bytes().equals(before[i]!)).toBe(true);
      expect(list[i]!.bytes().buffer.byteLength).toBe(list[i]!.length);
    }
  });

  it('moves into a newer body without copying the others out of the old one on the way', () => {
    const list = elements();
    const first = new MarshalledArray('a(ssso)', list);
    const copyOut = vi.spyOn(MarshalledElement.prototype, 'copyOut');
    let second: MarshalledArray;
    try {
      second = new MarshalledArray('a(ssso)', list);
      expect(copyOut).not.toHaveBeenCalled();
    } finally {
      copyOut.mockRestore();
    }
    expect(second.body.equals(first.body)).toBe(true);
    expect(inBody(second, list)).toBe(list.length);
    // Leaving the second body now compacts it as usual.
    for (const e of list.slice(0, 3)) e.release();
    expect(inBody(second, list.slice(3))).toBe(0);
    const third = new MarshalledArray('a(ssso)', list.slice(3));
    // The bytes copied out on the way are still right: the same as a body marshalled afresh.
    expect(third.body.equals(new MarshalledArray('a(ssso)', elements().slice(3)).body)).toBe(true);
    expect(inBody(third, list.slice(3))).toBe(3);
  });

  it('cannot be used once released, nor joined twice into one body', () => {
    const [e, f] = elements();
    new MarshalledArray('a(ssso)', [e!]);
    e!.release();
    expect(() => e!.bytes()).toThrow(/released/);
    expect(() => new MarshalledArray('a(ssso)', [e!])).toThrow(/released/);
    expect(() => new MarshalledArray('a(ssso)', [f!, f!])).toThrow(/twice/);
  });
});
