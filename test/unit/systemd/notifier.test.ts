import { describe, expect, it } from 'vitest';
import { createNotifier, notifierFrom, watchdogIntervalFromEnv, type Notifier } from '../../../src/systemd/notifier.js';

describe('notifier', () => {
  it.each<[string, (n: Notifier) => void, string[], string]>([
    ['sends the sd_notify lines systemd expects', (n) => {
      n.ready('running: 0 machines');
      n.reloading('reloading configuration');
      n.ready('running: 1 machines');
      n.stopping('stopping');
      n.watchdog();
      n.extendTimeout(30_000);
    }, [
      'READY=1\nSTATUS=running: 0 machines',
      'RELOADING=1\nSTATUS=reloading configuration',
      'READY=1\nSTATUS=running: 1 machines',
      'STOPPING=1\nSTATUS=stopping',
      'WATCHDOG=1',
      'EXTEND_TIMEOUT_USEC=30000000',
    ], 'stopping'],
    ['sends STATUS= only when the text changed, and never a newline inside it', (n) => {
      n.status('a');
      n.status('a');
      n.status('two\nlines');
      n.status('two\nlines');
      n.ready('b');
      n.status('b');
    }, ['STATUS=a', 'STATUS=two lines', 'READY=1\nSTATUS=b'], 'b'],
  ])('%s', (_, drive, expected, lastStatus) => {
    const sent: string[] = [];
    const n = notifierFrom((s) => sent.push(s), 0);
    drive(n);
    expect(sent).toEqual(expected);
    expect(n.lastStatus).toBe(lastStatus);
  });

  it('is a silent no-op without NOTIFY_SOCKET', () => {
    const n = createNotifier({});
    expect(n.watchdogIntervalMs).toBe(0);
    expect(() => (n.ready('x'), n.watchdog(), n.stopping())).not.toThrow();
  });

  it.each([
    [{ WATCHDOG_USEC: '6000000' }, 6000],
    [{ WATCHDOG_USEC: '6000000', WATCHDOG_PID: '4242' }, 6000],
    [{ WATCHDOG_USEC: '6000000', WATCHDOG_PID: '1' }, 0],
    [{ WATCHDOG_USEC: '0' }, 0],
    [{ WATCHDOG_USEC: 'x' }, 0],
    [{}, 0],
  ])('watchdog interval from %j is %d ms', (env, ms) => {
    expect(watchdogIntervalFromEnv(env, 4242)).toBe(ms);
  });
});
