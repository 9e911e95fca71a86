import { afterEach, describe, expect, it } from 'vitest';
import { Harness } from '../../support/agent-harness.js';
import type { Config } from '../../../src/config/config.js';
import { domainNameFor } from '../../../src/machine/names.js';

const dom = domainNameFor;
const spec = (extra: Record<string, unknown> = {}) => JSON.stringify({ cpus: 1, memoryMiB: 128, disks: [{ name: 'root', sizeGiB: 1 }], ...extra });
let h: Harness;
// The periodic resync is the one safety net that may run passes on a settled machine: put it out
// of the way so every pass a test counts was caused by something.
const quietResync = (c: Config) => (c.machines.resyncIntervalSec = 3600);

afterEach(async () => {
  await h?.agent.stop();
});

/** Passes the reconciler runs while fake time moves on by ms, once the observer has seen the last change. */
async function passesDuring(ms: number): Promise<number> {
  await h.advance(2 * h.config.machines.pollIntervalMs);
  const before = h.agent.reconciler.stats.passes;
  await h.advance(ms);
  return h.agent.reconciler.stats.passes - before;
}

describe('reconciler: a pass that changes nothing schedules no other pass', () => {
  it('a settled running machine and a settled stopped one get 0 passes over 10 s', async () => {
    h = await new Harness({ config: quietResync }).start();
    await h.createRunning('up');
    await h.service.create('down', spec({ power: 'off' }));
    await h.advanceUntil(() => h.service.get('down').status.state === 'stopped');
    expect(await passesDuring(10_000)).toBe(0);
  });

  it('the wedge: a domain started by hand while its power is off is handed to the sweeper once, then 0 passes', async () => {
    h = await new Harness({ behaviour: 'ignore', config: quietResync }).start();
    await h.service.create('off-1', spec({ power: 'off', gracePeriodSec: 30 }));
    await h.advanceUntil(() => h.service.get('off-1').status.state === 'stopped');
    h.hv.setState(dom('off-1'), 'running'); // virsh start
    const startedAt = h.clock.now();
    await h.advanceUntil(() => h.reasons('off-1').includes('ShutdownRequested'), 5000);
    const warned = h.event('off-1', 'StartedOutsideAgent')!;
    expect(warned.type).toBe('warning');
    expect(warned.message).toMatch(/started outside the agent while its power is off; shutting it down gracefully/);
    const status = h.service.get('off-1').status;
    expect(status.gracePeriodSec).toBe(30);
    expect(status.forceStopAt - startedAt).toBeGreaterThanOrEqual(30_000);
    expect(status.forceStopAt - startedAt).toBeLessThanOrEqual(31_100); // one poll late at most
    // While the sweeper owns it (the guest ignores the button), the reconciler stays quiet.
    expect(await passesDuring(10_000)).toBe(0);
    await h.advanceUntil(() => h.service.get('off-1').status.state === 'stopped', 30_000);
    expect(h.reasons('off-1')).toContain('ForceStopped');
    expect(h.hv.stateOf(dom('off-1'))).toBe('shutoff');
    expect(h.reasons('off-1').filter((r) => r === 'StartedOutsideAgent')).toHaveLength(1);
    expect(await passesDuring(10_000)).toBe(0);
  });
});
