import { describe, expect, it } from 'vitest';
import { PartSequence, type Part } from '../../../src/lifecycle/part-sequence.js';
import type { Logger } from '../../../src/logging/logger.js';

/** Parts that record what happens to them in one shared list. */
function rig(names: string[], fail: { start?: string; stop?: string[]; afterStart?: (name: string) => void } = {}) {
  const calls: string[] = [];
  const errors: string[] = [];
  const logger: Logger = { error: (m) => errors.push(m), warn() {}, info() {}, debug() {} };
  const parts: Part[] = names.map((name) => ({
    name,
    async start() {
      calls.push(`start ${name}`);
      if (fail.start === name) throw new Error(`${name} would not start`);
      fail.afterStart?.(name);
    },
    async stop() {
      calls.push(`stop ${name}`);
      if (fail.stop?.includes(name)) throw new Error(`${name} would not stop`);
    },
  }));
  return { calls, errors, sequence: new PartSequence(parts, logger) };
}

const running = () => new AbortController().signal;

describe('PartSequence', () => {
  it('starts in order and stops in reverse order', async () => {
    const { calls, errors, sequence } = rig(['agent', 'bus', 'dbus']);
    expect(await sequence.start(running())).toBe(true);
    expect(await sequence.stop()).toBe(true);
    expect(calls).toEqual(['start agent', 'start bus', 'start dbus', 'stop dbus', 'stop bus', 'stop agent']);
    expect(errors).toEqual([]);
  });

  it('a part that fails to stop is logged and the others still stop; the stop is not clean', async () => {
    const { calls, errors, sequence } = rig(['agent', 'bus', 'dbus', 'watchdog'], { stop: ['dbus', 'agent'] });
    await sequence.start(running());
    expect(await sequence.stop()).toBe(false);
    expect(calls.slice(4)).toEqual(['stop watchdog', 'stop dbus', 'stop bus', 'stop agent']);
    expect(errors).toEqual(['stop failed: dbus: dbus would not stop', 'stop failed: agent: agent would not stop']);
  });

  it('a part that fails to start is not stopped; the ones before it are, and nothing after it starts', async () => {
    const { calls, sequence } = rig(['agent', 'bus', 'dbus'], { start: 'bus' });
    await expect(sequence.start(running())).rejects.toThrow('bus would not start');
    expect(await sequence.stop()).toBe(true);
    expect(calls).toEqual(['start agent', 'start bus', 'stop agent']);
  });

  it('checks the signal between parts: an abort stops the start, and stop undoes what started', async () => {
    const abort = new AbortController();
    // SIGTERM arrives while the bus connects.
    const { calls, sequence } = rig(['agent', 'bus', 'dbus'], { afterStart: (name) => name === 'bus' && abort.abort() });
    expect(await sequence.start(abort.signal)).toBe(false);
    expect(await sequence.stop()).toBe(true);
    expect(calls).toEqual(['start agent', 'start bus', 'stop bus', 'stop agent']);
  });

  it('an already aborted signal starts nothing', async () => {
    const abort = new AbortController();
    abort.abort();
    const { calls, sequence } = rig(['agent']);
    expect(await sequence.start(abort.signal)).toBe(false);
    expect(await sequence.stop()).toBe(true);
    expect(calls).toEqual([]);
  });

  it('stops each part once, and starts nothing after a stop', async () => {
    const { calls, sequence } = rig(['agent', 'bus']);
    await sequence.start(running());
    await sequence.stop();
    await sequence.stop();
    expect(await sequence.start(running())).toBe(true);
    expect(calls).toEqual(['start agent', 'start bus', 'stop bus', 'stop agent']);
  });

  it('a part without a stop is skipped at stop', async () => {
    const calls: string[] = [];
    const sequence = new PartSequence([
      { name: 'agent', start: () => void calls.push('start agent'), stop: () => void calls.push('stop agent') },
      { name: 'ready', start: () => void calls.push('ready') },
    ], { error() {}, warn() {}, info() {}, debug() {} });
    await sequence.start(running());
    expect(await sequence.stop()).toBe(true);
    expect(calls).toEqual(['start agent', 'ready', 'stop agent']);
  });
});
