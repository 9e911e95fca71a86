import { afterEach, describe, expect, it } from 'vitest';
import { HostShutdownHandler } from '../../../src/hostshutdown/host-shutdown-handler.js';
import type { HostPlatform, InhibitorLock } from '../../../src/hostshutdown/host-platform.js';
import { silentLogger } from '../../../src/logging/logger.js';
import { domainNameFor } from '../../../src/machine/names.js';
import { Harness, SPEC } from '../../support/agent-harness.js';

/** logind and systemd as the handler sees them. */
class FakePlatform implements HostPlatform {
  systemStateValue: string | Error = 'running';
  locksHeld = 0;
  locksTaken = 0;
  inhibitFails = false;
  private listener: ((active: boolean) => void) | undefined;
  async systemState(): Promise<string> {
    if (this.systemStateValue instanceof Error) throw this.systemStateValue;
    return this.systemStateValue;
  }
  async inhibitShutdown(): Promise<InhibitorLock> {
    if (this.inhibitFails) throw new Error('no logind');
    this.locksHeld++;
    this.locksTaken++;
    let held = true;
    return { kind: 'fd', release: () => held && ((held = false), this.locksHeld--) };
  }
  async onPrepareForShutdown(l: (active: boolean) => void): Promise<void> {
    this.listener = l;
  }
  close(): void {}
  prepare(active: boolean) {
    this.listener!(active);
  }
}

let h: Harness;
afterEach(async () => {
  await h?.agent.stop();
});

async function setup(opts: { onServiceStop?: 'leave' | 'shutdown'; action?: 'shutdown' | 'leave' } = {}) {
  h = await new Harness({
    behaviour: 'obey',
    shutdownDelayMs: 2000,
    config: (c) => {
      c.hostShutdown = { ...c.hostShutdown, timeoutSec: 30, onServiceStop: opts.onServiceStop ?? 'leave', action: opts.action ?? 'shutdown' };
    },
  }).start();
  await h.createRunning('web');
  await h.createRunning('db');
  h.hv.setGuestBehaviour(domainNameFor('db'), 'ignore');
  const platform = new FakePlatform();
  const handler = new HostShutdownHandler({
    platform,
    hypervisor: h.hv,
    target: h.agent,
    clock: h.clock,
    logger: silentLogger,
    settings: () => ({ ...h.config.hostShutdown, retryIntervalMs: 5000 }),
    pollIntervalMs: 500,
    destroyTimeoutMs: 3000,
  });
  await handler.start();
  const records = () => JSON.stringify([...h.store.records.values()].map((r) => ({ spec: r.spec, del: r.deletionTimestamp, f: r.status.forceStopAt })));
  return { platform, handler, records };
}

const running = (name: string) => h.hv.stateOf(domainNameFor(name)) === 'running';

async function finish<T>(p: Promise<T>): Promise<T> {
  let done = false;
  void p.finally(() => (done = true));
  await h.advanceUntil(() => done, 100_000);
  return p;
}

describe('host shutdown handler', () => {
  it('takes a delay lock at start', async () => {
    const { platform } = await setup();
    expect(platform.locksHeld).toBe(1);
  });

  it('service stop (SystemState running): guests left running, lock released, records untouched', async () => {
    const { platform, handler, records } = await setup();
    const before = records();
    const out = await handler.onStop();
    expect(out.decision).toMatchObject({ reason: 'service-stop', guests: 'leave' });
    expect(out.report).toBeUndefined();
    expect(running('web') && running('db')).toBe(true);
    expect(platform.locksHeld).toBe(0);
    expect(records()).toBe(before);
  });

  it('onServiceStop=shutdown: a plain stop shuts the guests down too', async () => {
    const { handler } = await setup({ onServiceStop: 'shutdown' });
    const out = await finish(handler.onStop());
    expect(out.decision.reason).toBe('service-stop');
    expect(out.report).toMatchObject({ cleanly: 1, destroyed: 1 });
    expect(h.service.info().state).toBe('stopping');
  });

  it('host shutdown: PrepareForShutdown starts the guests down at once; SIGTERM finishes; nothing restarts them; records untouched', async () => {
    const { platform, handler, records } = await setup();
    const before = records();
    platform.prepare(true);
    expect(h.service.info().state).toBe('host-shutdown');
    await expect(h.service.create('late', SPEC)).rejects.toMatchObject({ kind: 'ShuttingDown' });
    await h.advance(3000); // the obeying guest is off after 2 s ...
    expect(running('web')).toBe(false);
    await h.advance(40_000); // ... and stays off: the reconciler no longer starts guests whose power is on
    expect(running('web')).toBe(false);
    platform.systemStateValue = 'stopping';
    const out = await finish(handler.onStop());
    expect(out.decision).toMatchObject({ reason: 'host-shutdown', guests: 'shutdown' });
    expect(out.report).toMatchObject({ cleanly: 1, destroyed: 1, leftRunning: 0 });
    expect(running('db')).toBe(false);
    expect(platform.locksHeld).toBe(0);
    expect(records()).toBe(before);
    expect(h.service.get('web').spec.power).toBe('on');
  });

  it('host shutdown seen only at SIGTERM (systemctl start poweroff.target skips logind)', async () => {
    const { platform, handler } = await setup();
    platform.systemStateValue = 'stopping';
    const out = await finish(handler.onStop());
    expect(out.report).toMatchObject({ cleanly: 1, destroyed: 1 });
    expect(h.service.info().state).toBe('host-shutdown');
  });

  it('hostShutdown.action=leave: the host goes down and the guests are left to libvirt', async () => {
    const { platform, handler } = await setup({ action: 'leave' });
    platform.prepare(true);
    expect(platform.locksHeld).toBe(0);
    platform.systemStateValue = 'stopping';
    const out = await handler.onStop();
    expect(out.decision).toMatchObject({ reason: 'host-shutdown', guests: 'leave' });
    expect(running('web') && running('db')).toBe(true);
  });

  it('a cancelled shutdown (PrepareForShutdown false) resumes: guests are started again, the lock is still held', async () => {
    const { platform } = await setup();
    platform.prepare(true);
    await h.advance(3000);
    expect(running('web')).toBe(false);
    platform.prepare(false);
    await h.advance(100);
    expect(h.service.info().state).toBe('running');
    await h.advanceUntil(() => running('web'));
    expect(platform.locksHeld).toBe(1);
    expect(platform.locksTaken).toBe(1);
    await h.advance(60_000);
    expect(running('db')).toBe(true); // no destroy at the old deadline
  });

  it('without logind or systemd on the bus: a stop is a service stop, and start() does not fail', async () => {
    const { handler, platform } = await setup();
    platform.systemStateValue = new Error('no bus');
    const out = await handler.onStop();
    expect(out.decision.reason).toBe('service-stop');
    const h2 = new HostShutdownHandler({
      platform: Object.assign(new FakePlatform(), { inhibitFails: true }),
      hypervisor: h.hv, target: h.agent, clock: h.clock, logger: silentLogger,
      settings: () => ({ ...h.config.hostShutdown, retryIntervalMs: 5000 }),
    });
    await expect(h2.start()).resolves.toBeUndefined();
  });
});
