import { describe, expect, it } from 'vitest';
import { bootedAgain, serialProgress, whyNotResumed, type Tick } from '../../support/guest-images.js';

// The checks the real-guest tests use to tell a resumed guest from a rebooted one, on serial logs
// as the test guest writes them: whether qemu started the log anew or appended to it.

const A = '1a2b3c4d';
const B = '9f8e7d6c';
function boot(id: string, from: number, to: number): string {
  const ticks: string[] = [];
  for (let n = from; n <= to; n++) ticks.push(`VMKEEPER-GUEST TICK ${n} boot=${id}`);
  const start = from === 1 ? ['[    0.000000] Linux version 6.1.0-57-amd64', 'VMKEEPER-GUEST READY mode=acpi'] : [];
  return [...start, ...ticks].join('\n') + '\n';
}
const before: Tick = { n: 6, boot: A };
const logged = boot(A, 1, 6);

describe('whyNotResumed and bootedAgain on what the guest printed after a save or poweroff', () => {
  it.each([
    ['resumed, log started anew', boot(A, 7, 12), undefined, false],
    ['resumed, log appended', logged + boot(A, 7, 12), undefined, false],
    ['rebooted, log started anew (its counter passes 7 too)', boot(B, 1, 12), /booted again \(TICK 1 boot=9f8e7d6c/, true],
    ['rebooted, log appended', logged + boot(B, 1, 12), /booted again/, true],
    ['resumed late: ticks lost', boot(A, 9, 12), /went on at 9, not 7/, false],
    ['a gap after resuming', boot(A, 7, 8) + boot(A, 10, 11), /jumped from 8 to 10/, false],
    ['nothing printed yet', '', /no TICK after 6/, false],
  ])('%s', (_what, now, problem, rebooted) => {
    const p = serialProgress(now);
    const why = whyNotResumed(before, p);
    if (problem === undefined) expect(why).toBeUndefined();
    else expect(why).toMatch(problem);
    expect(bootedAgain(before, p)).toBe(rebooted);
  });
});
