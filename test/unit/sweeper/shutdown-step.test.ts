import { describe, expect, it } from 'vitest';
import { nextShutdownStep } from '../../../src/sweeper/shutdown-step.js';
import { newStatus, type MachineRecord } from '../../../src/machine/record.js';

const NOW = 1_000_000;
const RETRY = 5000;

function record(status: Partial<MachineRecord['status']>): MachineRecord {
  return { status: { ...newStatus(), ...status } } as MachineRecord;
}

describe('nextShutdownStep', () => {
  const cases: Array<[string, Partial<MachineRecord['status']>, boolean, ReturnType<typeof nextShutdownStep>]> = [
    ['domain already off finishes', { forceStopAt: NOW + 60_000 }, false, { kind: 'finish' }],
    ['first pass requests a shutdown', { forceStopAt: NOW + 60_000, gracePeriodSec: 60 }, true, { kind: 'request', thenForce: false }],
    ['zero grace forces at once', { forceStopAt: NOW, gracePeriodSec: 0 }, true, { kind: 'force' }],
    ['a first pass after the deadline still presses first, then forces', { forceStopAt: NOW - 500, gracePeriodSec: 2 }, true, { kind: 'request', thenForce: true }],
    ['a first pass exactly at the deadline presses first, then forces', { forceStopAt: NOW, gracePeriodSec: 2 }, true, { kind: 'request', thenForce: true }],
    ['no deadline at all still presses', { gracePeriodSec: 0 }, true, { kind: 'request', thenForce: false }],
    ['deadline passed after the press forces', { shutdownRequestedAt: NOW - 61_000, lastShutdownSentAt: NOW - 1000, forceStopAt: NOW - 1000 }, true, { kind: 'force' }],
    ['retry interval passed resends', { shutdownRequestedAt: NOW - 6000, lastShutdownSentAt: NOW - 5000, forceStopAt: NOW + 54_000 }, true, { kind: 'retry' }],
    ['waits for the next resend', { shutdownRequestedAt: NOW - 2000, lastShutdownSentAt: NOW - 2000, forceStopAt: NOW + 58_000 }, true, { kind: 'wait', until: NOW + 3000 }],
    ['waits for a deadline before the resend', { shutdownRequestedAt: NOW - 2000, lastShutdownSentAt: NOW - 2000, forceStopAt: NOW + 1000 }, true, { kind: 'wait', until: NOW + 1000 }],
    ['off after a force stop finishes', { shutdownRequestedAt: NOW - 9000, forceStoppedAt: NOW - 10, forceStopAt: NOW - 10 }, false, { kind: 'finish' }],
  ];
  it.each(cases)('%s', (_name, status, active, expected) => {
    expect(nextShutdownStep(record(status), active, NOW, RETRY)).toEqual(expected);
  });
});
