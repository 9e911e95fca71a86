import { describe, expect, it } from 'vitest';
import { decideShutdownStep, type ShutdownProgress, type ShutdownStep } from '../../../src/domains/shutdown-policy.js';

const NOW = 1_000_000;
const RETRY = 5000;

const asked = (lastSentAt: number, forceStopAt: number | undefined): ShutdownProgress => ({ asked: true, lastSentAt, forceStopAt, destroyUnasked: false });
const unasked = (forceStopAt: number | undefined, destroyUnasked: boolean): ShutdownProgress => ({ asked: false, lastSentAt: 0, forceStopAt, destroyUnasked });

describe('decideShutdownStep', () => {
  const cases: Array<[string, ShutdownProgress, boolean, ShutdownStep]> = [
    ['an inactive domain finishes whatever the progress', asked(NOW - 9000, NOW - 1), false, { kind: 'finish' }],
    ['never asked: ask', unasked(NOW + 30_000, false), true, { kind: 'request', thenForce: false }],
    ['never asked, deadline passed: ask first, then destroy', unasked(NOW - 1, false), true, { kind: 'request', thenForce: true }],
    ['never asked, deadline passed, destroying unasked allowed: destroy', unasked(NOW, true), true, { kind: 'force' }],
    ['never asked, no deadline, destroying unasked allowed: still ask', unasked(undefined, true), true, { kind: 'request', thenForce: false }],
    ['asked, retry interval over: ask again', asked(NOW - RETRY, NOW + 20_000), true, { kind: 'retry' }],
    ['asked, deadline reached: destroy, not ask again', asked(NOW - RETRY, NOW), true, { kind: 'force' }],
    ['asked, waits for the next press', asked(NOW - 1000, NOW + 20_000), true, { kind: 'wait', until: NOW + 4000 }],
    ['asked, waits for a deadline before the next press', asked(NOW - 1000, NOW + 2000), true, { kind: 'wait', until: NOW + 2000 }],
    ['asked, no deadline: presses again forever', asked(NOW - 1000, undefined), true, { kind: 'wait', until: NOW + 4000 }],
  ];
  it.each(cases)('%s', (_name, progress, active, expected) => {
    expect(decideShutdownStep(progress, active, NOW, RETRY)).toEqual(expected);
  });
});
