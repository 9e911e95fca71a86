import { describe, expect, it } from 'vitest';
import { FakeClock } from '../../support/fakes/fake-clock.js';
import { silentLogger } from '../../../src/logging/logger.js';
import { notifierFrom } from '../../../src/systemd/notifier.js';
import { Watchdog, assessHealth, healthThresholds } from '../../../src/systemd/watchdog.js';

const T = healthThresholds({ watchdogMs: 30_000, sweepIntervalMs: 10_000, callTimeoutMs: 30_000 });

describe('health assessment', () => {
  const base = { now: 1_000_000, loopLagMs: 5, startedAt: 900_000, lastSweepAt: 995_000, lastBusAnswerAt: 990_000, stopping: false };
  it.each([
    ['all fresh', {}, []],
    ['libvirt down still sweeps (degraded is healthy)', { lastSweepAt: 999_000 }, []],
    ['loop lag above half the watchdog', { loopLagMs: 16_000 }, ['event loop lagged 16000 ms']],
    ['sweeper wedged', { lastSweepAt: 900_000 }, ['no sweep completed for 100s']],
    ['no sweep yet, but just started', { lastSweepAt: 0, startedAt: 990_000 }, []],
    ['no sweep since start', { lastSweepAt: 0, startedAt: 900_000 }, ['no sweep completed for 100s']],
    ['bus unanswered', { lastBusAnswerAt: 950_000 }, ['D-Bus self-call unanswered for 50s']],
    ['no bus probe configured', { lastBusAnswerAt: undefined }, []],
    ['stopping: only the loop counts', { stopping: true, lastSweepAt: 0, lastBusAnswerAt: 0 }, []],
    ['stopping with a blocked loop', { stopping: true, loopLagMs: 20_000 }, ['event loop lagged 20000 ms']],
  ] as const)('%s', (_, patch, problems) => {
    const h = assessHealth({ ...base, ...patch }, T);
    expect(h.problems).toEqual(problems);
    expect(h.healthy).toBe(problems.length === 0);
  });

  it('thresholds follow the watchdog, sweep interval and call timeout', () => {
    expect(T).toEqual({ maxLoopLagMs: 15_000, sweepStaleAfterMs: 80_000, busStaleAfterMs: 45_000 });
  });
});

describe('Watchdog', () => {
  function setup(opts: { probe?: () => Promise<void> } = {}) {
    const clock = new FakeClock();
    const sent: string[] = [];
    let lastSweepAt = 0;
    const wd = new Watchdog({
      clock,
      notifier: notifierFrom((s) => sent.push(s), 6000),
      logger: silentLogger,
      thresholds: healthThresholds({ watchdogMs: 6000, sweepIntervalMs: 2000, callTimeoutMs: 1000 }),
      lastSweepAt: () => lastSweepAt,
      busProbe: opts.probe,
      probeTimeoutMs: 1000,
    });
    const pings = () => sent.filter((s) => s === 'WATCHDOG=1').length;
    return { clock, wd, pings, sweep: () => (lastSweepAt = clock.now()) };
  }

  it('pings at half the interval while the sweeper completes passes and the bus answers', async () => {
    const s = setup({ probe: async () => {} });
    s.wd.start();
    expect(s.wd.pingIntervalMs).toBe(3000);
    for (let i = 0; i < 10; i++) {
      s.sweep();
      await s.clock.advance(3000);
    }
    expect(s.pings()).toBe(11);
  });

  it('stops pinging when the sweeper is wedged, and resumes when it completes again', async () => {
    const s = setup();
    s.wd.start();
    s.sweep();
    await s.clock.advance(30_000); // stale after 2*2 s + 2*1 s = 6 s
    const before = s.pings();
    await s.clock.advance(30_000);
    expect(s.pings()).toBe(before);
    s.sweep();
    await s.clock.advance(3000);
    expect(s.pings()).toBe(before + 1);
  });

  it('stops pinging when our own D-Bus calls go unanswered', async () => {
    let answer = true;
    const s = setup({ probe: () => (answer ? Promise.resolve() : new Promise<void>(() => {})) });
    s.wd.start();
    for (let i = 0; i < 4; i++) {
      s.sweep();
      await s.clock.advance(3000);
    }
    const before = s.pings();
    answer = false;
    for (let i = 0; i < 10; i++) {
      s.sweep();
      await s.clock.advance(3000);
    }
    // The probe in flight at the switch still answered; from then on 10 s (3 * 3 s, min 10 s) of silence.
    expect(s.pings() - before).toBeLessThanOrEqual(5);
    expect(s.wd.check().problems.join()).toMatch(/D-Bus self-call unanswered/);
  });

  it('is off without WATCHDOG_USEC', () => {
    const clock = new FakeClock();
    const wd = new Watchdog({ clock, notifier: notifierFrom(() => {}, 0), logger: silentLogger, thresholds: T, lastSweepAt: () => 0 });
    wd.start();
    expect(wd.enabled).toBe(false);
    expect(clock.pendingTimers).toBe(0);
  });
});
