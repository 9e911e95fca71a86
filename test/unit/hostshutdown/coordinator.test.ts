import { describe, expect, it } from 'vitest';
import { HostShutdownCoordinator, type HostShutdownProgress } from '../../../src/hostshutdown/coordinator.js';
import { FakeHypervisor, type GuestBehaviour } from '../../support/fakes/fake-hypervisor.js';
import { FakeClock } from '../../support/fakes/fake-clock.js';
import { silentLogger } from '../../../src/logging/logger.js';

async function setup(guests: Record<string, GuestBehaviour>, opts: { shutdownDelayMs?: number; parallelism?: number } = {}) {
  const clock = new FakeClock();
  const hv = new FakeHypervisor({ clock, shutdownDelayMs: opts.shutdownDelayMs ?? 2000 });
  for (const [name, behaviour] of Object.entries(guests)) {
    hv.addDomain(`vmkeeper-${name}`, 'running');
    hv.setGuestBehaviour(`vmkeeper-${name}`, behaviour);
  }
  hv.addDomain('not-ours', 'running'); // a host domain without our prefix is never touched
  const progress: HostShutdownProgress[] = [];
  const c = new HostShutdownCoordinator({
    hypervisor: hv, clock, logger: silentLogger,
    timeoutMs: 30_000, retryIntervalMs: 5000, parallelism: opts.parallelism ?? 8,
    pollIntervalMs: 500, destroyTimeoutMs: 3000,
    onProgress: (p) => progress.push(p),
  });
  return { clock, hv, c, progress };
}

async function runToEnd(clock: FakeClock, p: Promise<unknown>, limitMs = 120_000) {
  let done = false;
  void p.finally(() => (done = true));
  for (let t = 0; !done && t < limitMs; t += 100) await clock.advance(100);
  expect(done).toBe(true);
}

describe('host shutdown coordinator', () => {
  it('obeying guests go off cleanly in parallel, well before the timeout', async () => {
    const { clock, hv, c } = await setup({ a: 'obey', b: 'obey', c: 'obey' });
    const run = c.run();
    await runToEnd(clock, run);
    const r = await run;
    expect(r).toMatchObject({ cleanly: 3, destroyed: 0, leftRunning: 0 });
    expect(r.finishedAt - r.startedAt).toBeLessThanOrEqual(2500); // 2 s shutdown + one poll, not 3 x 2 s
    expect(r.guests.map((g) => g.shutdownRequests)).toEqual([1, 1, 1]);
    expect(hv.stateOf('not-ours')).toBe('running');
    expect(hv.calls.some((x) => x.name === 'not-ours')).toBe(false);
  });

  it('an ignoring guest gets the button every retry interval and is destroyed at the timeout itself', async () => {
    const { clock, hv, c } = await setup({ good: 'obey', deaf: 'ignore' });
    const run = c.run();
    await runToEnd(clock, run);
    const r = await run;
    expect(r).toMatchObject({ cleanly: 1, destroyed: 1, leftRunning: 0 });
    const deaf = r.guests.find((g) => g.domain === 'vmkeeper-deaf')!;
    expect(deaf.outcome).toBe('destroyed');
    expect(deaf.afterMs).toBeGreaterThanOrEqual(30_000);
    expect(deaf.afterMs).toBeLessThan(30_600);
    expect(hv.shutdownRequests('vmkeeper-deaf')).toBe(6); // at 0, 5, 10, 15, 20, 25 s
    expect(hv.stateOf('vmkeeper-deaf')).toBe('shutoff');
    expect(r.guests.find((g) => g.domain === 'vmkeeper-good')!.outcome).toBe('shut-down');
  });

  it('a hanging guest whose destroy never returns is reported left running, and the run still ends', async () => {
    const { clock, c } = await setup({ ok: 'obey', stuck: 'hang' });
    const run = c.run();
    await runToEnd(clock, run);
    const r = await run;
    expect(r).toMatchObject({ cleanly: 1, destroyed: 0, leftRunning: 1 });
    expect(r.finishedAt - r.startedAt).toBeLessThanOrEqual(30_000 + 3000 + 100); // timeout + one bounded destroy
  });

  it('bounded parallelism: never more shutdown requests in flight than allowed', async () => {
    const names = Object.fromEntries(Array.from({ length: 10 }, (_, i) => [`g${i}`, 'obey' as const]));
    const { clock, hv, c } = await setup(names, { parallelism: 3 });
    let inFlight = 0;
    let maxInFlight = 0;
    const original = hv.shutdownDomain.bind(hv);
    hv.shutdownDomain = async (name: string) => {
      inFlight++;
      maxInFlight = Math.max(maxInFlight, inFlight);
      await clock.sleep(100);
      await original(name);
      inFlight--;
    };
    const run = c.run();
    await runToEnd(clock, run);
    expect((await run).cleanly).toBe(10);
    expect(maxInFlight).toBe(3);
  });

  it('no guests running: done at once; a second run() returns the same run', async () => {
    const { clock, c } = await setup({});
    const run = c.run();
    expect(c.run()).toBe(run);
    await runToEnd(clock, run);
    expect(await run).toMatchObject({ cleanly: 0, destroyed: 0, leftRunning: 0, guests: [] });
  });

  it('libvirt unavailable at first: keeps trying until it answers', async () => {
    const { clock, hv, c } = await setup({ a: 'obey' });
    hv.failNext('listDomains', new Error('connection refused'));
    hv.failNext('listDomains', new Error('connection refused'));
    const run = c.run();
    await runToEnd(clock, run);
    expect((await run).cleanly).toBe(1);
  });

  it('reports progress with the deadline, for STATUS= and EXTEND_TIMEOUT_USEC', async () => {
    const { clock, c, progress } = await setup({ a: 'obey', b: 'ignore' });
    const start = clock.now();
    const run = c.run();
    await runToEnd(clock, run);
    expect(progress[0]).toMatchObject({ total: 2, stillRunning: 2, deadlineAt: start + 30_000 });
    expect(progress.some((p) => p.stillRunning === 1)).toBe(true);
    expect(progress.at(-1)).toMatchObject({ stillRunning: 0 });
  });
});
