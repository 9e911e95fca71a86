import { describe, expect, it } from 'vitest';
import { decodeFrames, encodeFrame } from '../../../src/events/frame.js';

const frames = (...texts: string[]) => Buffer.concat(texts.map((t) => encodeFrame(Buffer.from(t))));

describe('journal frames', () => {
  it('decode what was encoded, in order', () => {
    const data = frames('one', '', 'three');
    const { payloads, validBytes } = decodeFrames(data);
    expect(payloads.map(String)).toEqual(['one', '', 'three']);
    expect(validBytes).toBe(data.length);
  });

  it.each([
    ['a torn header', (d: Buffer, at: number) => d.subarray(0, at + 4)],
    ['a torn payload', (d: Buffer) => d.subarray(0, d.length - 2)],
    ['a flipped payload byte', (d: Buffer) => Buffer.concat([d.subarray(0, d.length - 1), Buffer.from('X')])],
    ['a huge length field', (d: Buffer, at: number) => {
      const copy = Buffer.from(d);
      copy.writeUInt32LE(0x7fffffff, at);
      return copy;
    }],
  ])('drop %s at the tail and keep the frames before it', (_name, damage) => {
    const intact = frames('first', 'second');
    const data = damage(Buffer.concat([intact, encodeFrame(Buffer.from('last'))]), intact.length);
    const { payloads, validBytes } = decodeFrames(data);
    expect(payloads.map(String)).toEqual(['first', 'second']);
    expect(validBytes).toBe(intact.length);
  });
});
