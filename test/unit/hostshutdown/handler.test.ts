import { afterEach, describe, expect, it } from 'vitest';
import { HostShutdownHandler } from '../../../src/hostshutdown/host-shutdown-handler.js';
import type { ShutdownRecord } from '../../../src/hostshutdown/stop-procedure.js';
import { silentLogger } from '../../../src/logging/logger.js';
import { domainNameFor } from '../../../src/machine/names.js';
import { Harness, SPEC } from '../../support/agent-harness.js';
import { capturingLogger, FakePlatform } from './fake-platform.js';

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
  const logger = capturingLogger();
  const handler = new HostShutdownHandler({
    platform,
    procedure: h.agent.stopProcedure,
    target: h.agent,
    clock: h.clock,
    logger,
    settings: () => h.config.hostShutdown,
  });
  await handler.start();
  const records = () => JSON.stringify([...h.store.records.values()].map((r) => ({ spec: r.spec, del: r.deletionTimestamp, f: r.status.forceStopAt })));
  return { platform, handler, records, logger };
}

/** How many guests of a stop record ended each way. */
function counts(r: ShutdownRecord | undefined): Record<string, number> {
  const out: Record<string, number> = {};
  for (const m of r?.machines ?? []) out[m.result] = (out[m.result] ?? 0) + 1;
  return out;
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
    expect(out.record).toBeUndefined();
    expect(running('web') && running('db')).toBe(true);
    expect(platform.locksHeld).toBe(0);
    expect(records()).toBe(before);
  });

  it('onServiceStop=shutdown: a plain stop shuts the guests down too', async () => {
    const { handler } = await setup({ onServiceStop: 'shutdown' });
    const out = await finish(handler.onStop());
    expect(out.decision.reason).toBe('service-stop');
    expect(counts(out.record)).toEqual({ clean: 1, forced: 1 });
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
    expect(counts(out.record)).toEqual({ clean: 1, forced: 1 });
    expect(running('db')).toBe(false);
    expect(platform.locksHeld).toBe(0);
    expect(records()).toBe(before);
    expect(h.service.get('web').spec.power).toBe('on');
  });

  it('host shutdown seen only at SIGTERM (systemctl start poweroff.target skips logind)', async () => {
    const { platform, handler } = await setup();
    platform.systemStateValue = 'stopping';
    const out = await finish(handler.onStop());
    expect(counts(out.record)).toEqual({ clean: 1, forced: 1 });
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
      procedure: h.agent.stopProcedure, target: h.agent, clock: h.clock, logger: silentLogger,
      settings: () => h.config.hostShutdown,
    });
    await expect(h2.start()).resolves.toBeUndefined();
  });

  it('losing the bus runs the service-stop decision (defect): with onServiceStop=shutdown a lost bus leaves every guest running and says why', async () => {
    const { platform, handler, records, logger } = await setup({ onServiceStop: 'shutdown' });
    const before = records();
    const out = await finish(handler.onStop('bus-lost'));
    expect(out.decision).toMatchObject({ reason: 'bus-lost', guests: 'leave' });
    expect(out.record).toBeUndefined();
    await h.advance(40_000); // past any shutdown deadline: nothing was sent, nothing is destroyed
    expect(running('web') && running('db')).toBe(true);
    expect(h.service.info().state).toBe('running');
    expect(records()).toBe(before);
    expect(platform.locksHeld).toBe(0);
    expect(logger.lines).toContain('warn lost the D-Bus connection; guests left running');
  });

  it('a lost bus during a host shutdown logind announced lets that shutdown finish', async () => {
    const { platform, handler } = await setup();
    platform.prepare(true);
    const out = await finish(handler.onStop('bus-lost'));
    expect(out.decision.reason).toBe('bus-lost');
    expect(counts(out.record)).toEqual({ clean: 1, forced: 1 });
  });

  it('the logind subscription is re-established after the system bus reconnects (defect): PrepareForShutdown is heard again, the lock is taken again', async () => {
    const { platform, logger } = await setup();
    platform.subscribeFailures = 2; // the bus is not back for the first two tries (retried after 1 s, then 2 s)
    platform.loseConnection();
    await h.advance(2900);
    expect(platform.subscriptions).toBe(1);
    await h.advance(200);
    expect(platform.subscriptions).toBe(2);
    expect(platform.locksTaken).toBe(2);
    expect(platform.locksHeld).toBe(1); // the new lock replaced the old one
    expect(logger.lines).toContain('info subscribed to logind PrepareForShutdown again on the new system bus connection');
    platform.prepare(true);
    expect(h.service.info().state).toBe('host-shutdown');
  });

  it('a stop ends the resubscription retries', async () => {
    const { platform, handler } = await setup();
    platform.subscribeFailures = 100;
    platform.loseConnection();
    await h.advance(1000);
    await handler.onStop();
    await h.advance(120_000);
    expect(platform.subscriptions).toBe(1);
    expect(platform.subscribeFailures).toBe(98);
    expect(platform.locksHeld).toBe(0);
  });
});

describe('host shutdown handler: the stop procedure and logind bound', () => {
  it('runs the stop procedure as "host-shutdown" or "service-stop" and returns its record', async () => {
    const { platform, handler } = await setup({ onServiceStop: 'shutdown' });
    platform.systemStateValue = 'stopping';
    const out = await finish(handler.onStop());
    expect(out.record).toMatchObject({ kind: 'host-shutdown', result: 'completed' });
    expect(h.agent.shutdownRecords.list().map((r) => r.kind)).toEqual(['host-shutdown']);
    const { handler: second } = await setup({ onServiceStop: 'shutdown' });
    expect((await finish(second.onStop())).record).toMatchObject({ kind: 'service-stop', result: 'completed' });
  });

  it.each([
    { delayUSec: 5_000_000, warns: true },
    { delayUSec: 60_000_000, warns: false },
  ])('warns once, naming the logind drop-in, when InhibitDelayMaxSec is below the bound ($delayUSec us)', async ({ delayUSec, warns }) => {
    h = await new Harness({ config: (c) => void (c.hostShutdown.timeoutSec = 30) }).start();
    const platform = new FakePlatform();
    platform.inhibitDelayMaxUSecValue = delayUSec;
    const logger = capturingLogger();
    const handler = new HostShutdownHandler({
      platform, procedure: h.agent.stopProcedure, target: h.agent, clock: h.clock, logger,
      settings: () => h.config.hostShutdown, stopAllowanceMs: 15_000,
    });
    await handler.start();
    const lines = logger.lines.filter((l) => /InhibitDelayMaxSec/.test(l));
    expect(lines).toEqual(warns
      ? ['warn logind waits at most 5s for shutdown delay locks (InhibitDelayMaxSec), below the host-shutdown bound of 45s: logind may go on before the guests are down; write InhibitDelayMaxSec=45 to a drop-in such as /etc/systemd/logind.conf.d/vmkeeper.conf and restart systemd-logind']
      : []);
    handler.close();
  });

  it('with hostShutdown.action "leave" there is nothing to wait for: no warning', async () => {
    h = await new Harness({ config: (c) => void (c.hostShutdown.action = 'leave') }).start();
    const platform = new FakePlatform();
    const logger = capturingLogger();
    const handler = new HostShutdownHandler({ platform, procedure: h.agent.stopProcedure, target: h.agent, clock: h.clock, logger, settings: () => h.config.hostShutdown });
    await handler.start();
    expect(logger.lines.filter((l) => /InhibitDelayMaxSec/.test(l))).toEqual([]);
    handler.close();
  });
});
