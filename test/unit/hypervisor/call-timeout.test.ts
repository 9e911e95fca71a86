import { describe, expect, it } from 'vitest';
import { CallTimeoutError, withCallTimeout } from '../../../src/hypervisor/libvirt/call-timeout.js';
import { FakeClock, flushMicrotasks } from '../../../src/lifecycle/fake-clock.js';
import { isAgentError } from '../../../src/machine/errors.js';

const never = () => new Promise<never>(() => {});

describe('withCallTimeout', () => {
  it('rejects a call that never settles with HypervisorUnavailable once the clock passes the limit', async () => {
    const clock = new FakeClock();
    let outcome: unknown;
    void withCallTimeout(clock, 5000, 'domainShutdown', never).catch((e: unknown) => (outcome = e));
    await clock.advance(4999);
    expect(outcome).toBeUndefined();
    await clock.advance(1);
    expect(outcome).toBeInstanceOf(CallTimeoutError);
    expect(isAgentError(outcome, 'HypervisorUnavailable')).toBe(true);
    expect((outcome as Error).message).toBe('libvirt call domainShutdown timed out after 5000 ms');
  });

  it.each([
    ['resolves', () => Promise.resolve(42), { value: 42 }],
    ['rejects', () => Promise.reject(new Error('Domain not found')), { error: 'Domain not found' }],
    ['throws synchronously', () => { throw new Error('sync'); }, { error: 'sync' }],
  ] as const)('passes through a call that %s in time and cancels its timer', async (_, call, expected) => {
    const clock = new FakeClock();
    const result = await withCallTimeout(clock, 1000, 'op', call as () => Promise<number>).then(
      (value) => ({ value }),
      (e: Error) => ({ error: e.message }),
    );
    expect(result).toEqual(expected);
    expect(clock.pendingTimers).toBe(0);
  });

  it('ignores a late answer after the timeout fired', async () => {
    const clock = new FakeClock();
    let finish!: (v: string) => void;
    const pending = withCallTimeout(clock, 10, 'op', () => new Promise<string>((r) => (finish = r)));
    const settled = pending.then((v) => v, (e: Error) => e.message);
    await clock.advance(10);
    finish('late');
    await flushMicrotasks();
    expect(await settled).toBe('libvirt call op timed out after 10 ms');
  });
});
