import { EventEmitter } from 'node:events';
import { describe, expect, it } from 'vitest';
import { inhibitWithChild, InhibitorNotConfirmedError, type InhibitChild, type InhibitorEntry } from '../../../src/hostshutdown/child-inhibitor.js';
import type { InhibitorLock } from '../../../src/hostshutdown/host-platform.js';
import { FakeClock, flushMicrotasks } from '../../support/fakes/fake-clock.js';
import { capturingLogger } from './fake-platform.js';

/** A systemd-inhibit child that lives until killed, or exits when told to. */
class FakeChild extends EventEmitter implements InhibitChild {
  exitCode: number | null = null;
  signalCode: NodeJS.Signals | null = null;
  readonly stderr = new EventEmitter();
  unrefed = false;
  constructor(readonly pid: number) {
    super();
  }
  kill(signal: NodeJS.Signals = 'SIGTERM'): boolean {
    this.signalCode = signal;
    this.emit('exit', null);
    return true;
  }
  unref(): void {
    this.unrefed = true;
  }
  exit(code: number, message: string) {
    this.stderr.emit('data', Buffer.from(message));
    this.exitCode = code;
    this.emit('exit', code);
  }
}

const OURS: InhibitorEntry = { what: 'shutdown', who: 'vmkeeperd', why: 'Shutting down virtual machines', mode: 'delay', uid: 0, pid: 4242 };

function setup(listed: (polls: number) => InhibitorEntry[] | Error) {
  const clock = new FakeClock();
  const logger = capturingLogger();
  const child = new FakeChild(4242);
  let polls = 0;
  let args: string[] = [];
  const result: { lock?: InhibitorLock; error?: unknown } = {};
  void inhibitWithChild({
    spawn: (a) => ((args = a), child),
    listInhibitors: async () => {
      const rows = listed(++polls);
      if (rows instanceof Error) throw rows;
      return rows;
    },
    clock,
    logger,
    confirmTimeoutMs: 2000,
    pollIntervalMs: 100,
  }, 'vmkeeperd', OURS.why).then((lock) => (result.lock = lock), (e: unknown) => (result.error = e));
  return { clock, logger, child, result, polls: () => polls, args: () => args };
}

describe('systemd-inhibit fallback lock', () => {
  it('counts as held only once logind lists the child as holding a shutdown delay lock', async () => {
    const others: InhibitorEntry = { ...OURS, who: 'libvirt', pid: 99 };
    const s = setup((n) => (n < 4 ? [others] : [others, OURS]));
    await flushMicrotasks();
    expect(s.args()).toEqual(['--what=shutdown', '--mode=delay', '--who=vmkeeperd', `--why=${OURS.why}`, 'sleep', 'infinity']);
    await s.clock.advance(200);
    expect(s.result).toEqual({}); // alive, but not listed yet: not held
    await s.clock.advance(100);
    expect(s.result.lock?.kind).toBe('child');
    expect(s.child.unrefed).toBe(true);
    s.result.lock!.release();
    expect(s.child.signalCode).toBe('SIGTERM');
  });

  it('the systemd-inhibit fallback assumes it holds the lock if the child lives 300 ms (defect): a child logind never lists fails with InhibitorNotConfirmedError, is killed, and is logged', async () => {
    // Listed rows that are not ours: another pid, a block lock, a sleep lock.
    const s = setup(() => [{ ...OURS, pid: 1 }, { ...OURS, mode: 'block' }, { ...OURS, what: 'sleep' }]);
    await s.clock.advance(1900);
    expect(s.result).toEqual({});
    await s.clock.advance(200);
    expect(s.result.error).toBeInstanceOf(InhibitorNotConfirmedError);
    expect((s.result.error as Error).message).toBe('systemd-inhibit (pid 4242) holds no shutdown delay lock in logind after 2000 ms');
    expect(s.child.signalCode).toBe('SIGTERM');
    expect(s.logger.lines).toContain(`error ${(s.result.error as Error).message}`);
    expect(s.clock.pendingTimers).toBe(0);
  });

  it('says why when ListInhibitors itself keeps failing', async () => {
    const s = setup(() => new Error('ListInhibitors got no answer within 3000 ms'));
    await s.clock.advance(2100);
    expect((s.result.error as Error).message).toMatch(/after 2000 ms; ListInhibitors failed: ListInhibitors got no answer/);
  });

  it('a child that exits (refused by logind) fails at once with its stderr', async () => {
    const s = setup(() => []);
    await s.clock.advance(100);
    s.child.exit(1, 'Failed to inhibit: Access denied\n');
    await s.clock.advance(100);
    expect((s.result.error as Error).message).toBe('systemd-inhibit exited (1): Failed to inhibit: Access denied');
    expect(s.polls()).toBeLessThan(4);
  });
});
