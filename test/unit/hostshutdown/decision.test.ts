import { describe, expect, it } from 'vitest';
import { decideStop, type GuestAction } from '../../../src/hostshutdown/decision.js';

describe('what a SIGTERM means', () => {
  // systemState, PrepareForShutdown seen, hostShutdown.action, onServiceStop -> reason, guests
  it.each<[string | undefined, boolean, GuestAction, GuestAction, string, GuestAction]>([
    ['stopping', true, 'shutdown', 'leave', 'host-shutdown', 'shutdown'],
    ['stopping', false, 'shutdown', 'leave', 'host-shutdown', 'shutdown'], // systemctl start poweroff.target skips logind
    ['stopping', false, 'leave', 'shutdown', 'host-shutdown', 'leave'],
    ['running', false, 'shutdown', 'leave', 'service-stop', 'leave'], // systemctl restart/stop
    ['degraded', false, 'shutdown', 'leave', 'service-stop', 'leave'],
    ['running', false, 'shutdown', 'shutdown', 'service-stop', 'shutdown'],
    ['running', true, 'shutdown', 'leave', 'host-shutdown', 'shutdown'], // logind announced it; systemd not there yet
    [undefined, true, 'shutdown', 'leave', 'host-shutdown', 'shutdown'],
    [undefined, false, 'shutdown', 'leave', 'service-stop', 'leave'], // nobody to ask: never touch guests by guess
    [undefined, false, 'shutdown', 'shutdown', 'service-stop', 'shutdown'],
    ['starting', false, 'shutdown', 'leave', 'service-stop', 'leave'],
  ])('SystemState=%s, PrepareForShutdown=%s, action=%s, onServiceStop=%s -> %s, guests %s',
    (systemState, prepareForShutdown, hostShutdownAction, onServiceStop, reason, guests) => {
      const d = decideStop({ systemState, prepareForShutdown, hostShutdownAction, onServiceStop });
      expect(d.reason).toBe(reason);
      expect(d.guests).toBe(guests);
      expect(d.why).not.toBe('');
    });
});
