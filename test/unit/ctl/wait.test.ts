import { describe, expect, it } from 'vitest';
import { runCli } from '../../../src/ctl/cli.js';
import { captureIo } from '../../../src/ctl/io.js';
import type { AgentSignal } from '../../../src/ctl/model.js';
import { FakeClock, flushMicrotasks } from '../../support/fakes/fake-clock.js';
import { FakeClient, machine } from './fake-client.js';

// --wait on a fake agent and a fake clock: every second of a countdown without sleeping.

function setup(o: { isTTY?: boolean } = {}) {
  const clock = new FakeClock();
  const client = new FakeClient().add(machine('web-1', { createdAt: clock.now() - 60_000 }));
  const io = captureIo({ isTTY: o.isTTY ?? true, columns: 100 });
  const abort = new AbortController();
  const run = (...argv: string[]) => runCli(argv, { io, clock, env: {}, connect: async () => client, signal: abort.signal });
  return { clock, client, io, abort, run };
}

/** The agent's side of a deletion: terminating with a deadline, as DeleteMachine does it. */
function deletesWithDeadline(s: ReturnType<typeof setup>, graceSec: number) {
  s.client.onDelete = (name) => {
    expect(s.client.subscribers).toBe(1); // subscribed before the call
    const now = s.clock.now();
    s.client.change(name, { state: 'terminating', deletionTimestamp: now, forceStopAt: now + graceSec * 1000, gracePeriodSec: graceSec });
    s.client.event(name, 'DeletionRequested', `deletion requested with a grace period of ${graceSec}s`, now);
  };
}

/** What is on the screen: the status line is redrawn in place with \r ESC[K. */
function screen(stdout: string): string[] {
  return stdout.split('\n').map((line) => line.split('\r\x1b[K').pop()!);
}

describe('delete --wait', () => {
  it('graceful path: shutdown requested, retried, completed, gone; a countdown on the terminal', async () => {
    const s = setup();
    deletesWithDeadline(s, 30);
    const done = s.run('delete', 'web-1', '--grace', '30', '--wait');
    await flushMicrotasks();
    expect(s.io.stdout).toContain('web-1: terminating, force stop in 30s');
    await s.clock.advance(1000);
    s.client.event('web-1', 'ShutdownRequested', 'ACPI shutdown sent; force stop in 29s');
    s.client.change('web-1', { shutdownRequestedAt: s.clock.now() });
    await s.clock.advance(5000);
    expect(s.io.stdout).toContain('web-1: terminating, force stop in 24s');
    s.client.event('web-1', 'ShutdownRetried', 'ACPI shutdown sent again');
    await s.clock.advance(2000);
    s.client.event('web-1', 'ShutdownCompleted', 'guest shut down by itself');
    s.client.change('web-1', { state: 'terminated' });
    s.client.remove('web-1');
    s.client.event('web-1', 'Deleted', 'domain, disks and record removed');

    expect(await done).toBe(0);
    expect(s.client.calls.slice(0, 2)).toEqual(['subscribe', 'delete web-1 30']);
    expect(screen(s.io.stdout).filter(Boolean)).toEqual([
      'web-1: deletion requested (grace 30s), waiting for it to be gone',
      'web-1: deletion requested: deletion requested with a grace period of 30s',
      'web-1: shutdown requested: ACPI shutdown sent; force stop in 29s',
      'web-1: shutdown retried: ACPI shutdown sent again',
      'web-1: shutdown completed: guest shut down by itself',
      'web-1: gone (after 8s)',
    ]);
    // Every second of the countdown was drawn.
    for (let left = 30; left >= 22; left--) expect(s.io.stdout).toContain(`force stop in ${left}s`);
    expect(s.io.stderr).toBe('');
    expect(s.clock.pendingTimers).toBe(0);
    expect(s.client.subscribers).toBe(0);
    expect(s.client.closed).toBe(true);
  });

  it('forced path: the deadline passes, the agent force-stops, the machine goes', async () => {
    const s = setup();
    deletesWithDeadline(s, 10);
    const done = s.run('delete', 'web-1', '--wait');
    await flushMicrotasks();
    await s.clock.advance(1000);
    s.client.event('web-1', 'ShutdownRequested', 'ACPI shutdown sent; force stop in 9s');
    for (let i = 0; i < 2; i++) {
      await s.clock.advance(4000);
      s.client.event('web-1', 'ShutdownRetried', 'ACPI shutdown sent again');
    }
    expect(s.io.stdout).toContain('force stop in 1s');
    await s.clock.advance(1000);
    expect(s.io.stdout).toContain('web-1: terminating, force stop now');
    s.client.event('web-1', 'ForceStopped', 'grace period of 10s ran out: domain destroyed', s.clock.now(), 'warning');
    s.client.change('web-1', { state: 'terminated' });
    s.client.remove('web-1');

    expect(await done).toBe(0);
    const lines = screen(s.io.stdout).filter(Boolean);
    expect(lines).toContain('web-1: force-stopped: grace period of 10s ran out: domain destroyed');
    expect(lines.filter((l) => l.startsWith('web-1: shutdown retried'))).toHaveLength(2);
    expect(lines.at(-1)).toBe('web-1: gone (after 10s)');
  });

  it('shows an overdue deadline while the agent is late with the force stop', async () => {
    const s = setup();
    deletesWithDeadline(s, 2);
    const done = s.run('delete', 'web-1', '--wait');
    await flushMicrotasks();
    await s.clock.advance(5000);
    expect(s.io.stdout).toContain('web-1: terminating, force stop overdue 3s');
    s.client.remove('web-1');
    expect(await done).toBe(0);
  });

  it('succeeds at once when the machine is gone before the first look (test-driver speed)', async () => {
    const s = setup();
    s.client.onDelete = (name) => s.client.remove(name);
    expect(await s.run('delete', 'web-1', '--wait')).toBe(0);
    expect(s.io.stdout).toContain('web-1: gone (after 0s)');
  });

  it('logs one line per state change and no countdown when stdout is not a terminal', async () => {
    const s = setup({ isTTY: false });
    deletesWithDeadline(s, 30);
    const done = s.run('delete', 'web-1', '--wait');
    await flushMicrotasks();
    await s.clock.advance(3000);
    s.client.change('web-1', { state: 'terminated' });
    s.client.remove('web-1');
    expect(await done).toBe(0);
    expect(s.io.stdout).not.toContain('\r');
    expect(s.io.stdout.split('\n').filter((l) => /^web-1: (terminating|terminated)/.test(l))).toEqual([
      'web-1: terminating, force stop in 30s',
      'web-1: terminated, force stop in 27s',
    ]);
  });

  it('fails with exit 8 when --timeout runs out, naming the state', async () => {
    const s = setup();
    deletesWithDeadline(s, 600);
    const done = s.run('delete', 'web-1', '--wait', '--timeout', '5');
    await flushMicrotasks();
    await s.clock.advance(5000);
    expect(await done).toBe(8);
    expect(s.io.stderr).toBe('vmkeeperctl: web-1: timed out after 5s waiting for the machine to be removed (state terminating)\n');
    expect(s.clock.pendingTimers).toBe(0);
  });

  it.each<[AgentSignal, RegExp]>([
    [{ kind: 'agent-gone' }, /vmkeeperd went away \(agent disconnected\) before the machine to be removed/],
    [{ kind: 'disconnected', reason: 'the bus closed the connection' }, /lost the D-Bus connection \(the bus closed the connection\)/],
  ])('fails with exit 8 on %j (the agent goes away, the bus connection breaks)', async (signal, message) => {
    const s = setup();
    deletesWithDeadline(s, 30);
    const done = s.run('delete', 'web-1', '--wait');
    await flushMicrotasks();
    s.client.emit(signal);
    expect(await done).toBe(8);
    expect(s.io.stderr).toMatch(message);
  });

  it('exits 130 when interrupted', async () => {
    const s = setup();
    deletesWithDeadline(s, 30);
    const done = s.run('delete', 'web-1', '--wait');
    await flushMicrotasks();
    s.abort.abort();
    expect(await done).toBe(130);
    expect(s.io.stderr).toContain('interrupted while waiting');
  });

  it('does not wait when the call fails, and says why', async () => {
    const s = setup();
    expect(await s.run('delete', 'ghost', '--wait')).toBe(3);
    expect(s.io.stderr).toBe('vmkeeperctl: no machine named "ghost"\n');
    expect(s.client.subscribers).toBe(0);
  });
});

describe('poweroff / poweron --wait', () => {
  it('poweroff reaches stopped; stale property changes from before the snapshot are ignored', async () => {
    const s = setup();
    s.client.onPower = (name) => {
      s.client.change(name, { state: 'stopping', power: 'off', forceStopAt: s.clock.now() + 60_000 });
      // A change that raced the call but is older than what GetAll will return.
      s.client.emit({ kind: 'machine-changed', path: s.client.machines.get(name)!.path, changed: { state: 'stopped', resourceVersion: 1 } });
    };
    const done = s.run('poweroff', 'web-1', '--wait');
    await flushMicrotasks();
    expect(s.io.stdout).toContain('web-1: stopping, force stop in 1m');
    await s.clock.advance(3000);
    s.client.event('web-1', 'ShutdownCompleted', 'guest shut down by itself');
    s.client.change('web-1', { state: 'stopped', forceStopAt: 0 });
    expect(await done).toBe(0);
    expect(s.io.stdout).toContain('web-1: stopped (after 3s)');
  });

  it('poweron fails with exit 8 and the reason when the machine enters state error', async () => {
    const s = setup();
    s.client.machines.set('web-1', machine('web-1', { state: 'stopped', power: 'off' }));
    s.client.onPower = (name) => s.client.change(name, { state: 'pending', power: 'on' });
    const done = s.run('poweron', 'web-1', '--wait');
    await flushMicrotasks();
    s.client.event('web-1', 'ReconcileFailed', 'cannot start domain: out of memory', 0, 'warning');
    s.client.change('web-1', { state: 'error' });
    expect(await done).toBe(8);
    expect(s.io.stderr).toBe('vmkeeperctl: web-1: machine entered state error: cannot start domain: out of memory\n');
  });

  it('poweron succeeds at once for a running machine, and --json prints the result', async () => {
    const s = setup();
    expect(await s.run('poweron', 'web-1', '--wait', '--json')).toBe(0);
    expect(JSON.parse(s.io.stdout)).toEqual({ name: 'web-1', state: 'running', elapsedSec: 0 });
  });

  it('poweroff fails with exit 8 when the machine is deleted meanwhile', async () => {
    const s = setup();
    s.client.onPower = (name) => s.client.change(name, { state: 'stopping', power: 'off', forceStopAt: s.clock.now() + 60_000 });
    const done = s.run('poweroff', 'web-1', '--wait');
    await flushMicrotasks();
    s.client.change('web-1', { state: 'terminating' });
    expect(await done).toBe(8);
    expect(s.io.stderr).toBe('vmkeeperctl: web-1: the machine is being deleted\n');
  });

  it('--timeout without --wait is a usage error', async () => {
    const s = setup();
    expect(await s.run('poweroff', 'web-1', '--timeout', '5')).toBe(2);
    expect(s.client.calls).toEqual([]);
  });
});
