import { describe, expect, it } from 'vitest';
import { TypedEmitter } from '../../../src/lifecycle/emitter.js';

interface Events {
  changed: (name: string, version: number) => void;
  removed: (name: string) => void;
}

describe('TypedEmitter', () => {
  it('calls every listener of the event with its arguments, and none of other events', () => {
    const e = new TypedEmitter<Events>();
    const seen: string[] = [];
    e.on('changed', (n, v) => seen.push(`1:${n}@${v}`));
    e.on('changed', (n, v) => seen.push(`2:${n}@${v}`));
    e.on('removed', (n) => seen.push(`removed:${n}`));
    e.emit('changed', 'web', 3);
    expect(seen).toEqual(['1:web@3', '2:web@3']);
  });

  it('off removes a listener; an event without listeners is a no-op', () => {
    const e = new TypedEmitter<Events>();
    const seen: string[] = [];
    const listener = (n: string) => seen.push(n);
    e.on('removed', listener);
    e.off('removed', listener);
    e.off('changed', () => undefined);
    e.emit('removed', 'x');
    e.emit('changed', 'y', 1);
    expect(seen).toEqual([]);
  });

  it('a listener that throws is reported and the others still run', () => {
    const errors: unknown[] = [];
    const e = new TypedEmitter<Events>((err) => errors.push(err));
    const seen: string[] = [];
    e.on('removed', () => {
      throw new Error('bad subscriber');
    });
    e.on('removed', (n) => seen.push(n));
    expect(() => e.emit('removed', 'x')).not.toThrow();
    expect(seen).toEqual(['x']);
    expect(errors.map((err) => (err as Error).message)).toEqual(['bad subscriber']);
  });

  it('a listener added during an emit waits for the next emit', () => {
    const e = new TypedEmitter<Events>();
    const seen: string[] = [];
    e.on('removed', (n) => {
      seen.push(`first:${n}`);
      e.on('removed', (m) => seen.push(`added:${m}`));
    });
    e.emit('removed', 'one');
    expect(seen).toEqual(['first:one']);
  });

  it('a listener that removes itself while handling an event leaves the others called', () => {
    const e = new TypedEmitter<Events>();
    const seen: string[] = [];
    const once = (n: string) => {
      seen.push(`once:${n}`);
      e.off('removed', once);
    };
    e.on('removed', once);
    e.on('removed', (n) => seen.push(`always:${n}`));
    e.emit('removed', 'a');
    e.emit('removed', 'b');
    expect(seen).toEqual(['once:a', 'always:a', 'always:b']);
  });
});
