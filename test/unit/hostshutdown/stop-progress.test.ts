import { describe, expect, it } from 'vitest';
import type { StopRunProgress } from '../../../src/hostshutdown/policy-stop-procedure.js';
import { stopStatusLine, TimeoutExtension } from '../../../src/hostshutdown/stop-progress.js';

const T0 = 1_000_000;
const base: StopRunProgress = {
  kind: 'host-shutdown', group: 1, groups: 3, minPriority: 500, guestsInGroup: 2, runningInGroup: 2,
  groupDeadlineAt: T0 + 20_000, runDeadlineAt: T0 + 60_000, finished: 0, total: 5,
};

describe('stop progress', () => {
  it.each([
    { p: base, now: T0, want: 'host shutdown: group 1/3 (priority >= 500): 2 of 2 guests still running, 20 s left' },
    { p: { ...base, kind: 'drain' as const, group: 2, minPriority: 100, guestsInGroup: 3, runningInGroup: 1 }, now: T0 + 8_500, want: 'drain: group 2/3 (priority >= 100): 1 of 3 guests still running, 12 s left' },
    { p: { ...base, kind: 'service-stop' as const }, now: T0 + 25_000, want: 'service stop: group 1/3 (priority >= 500): 2 of 2 guests still running, 0 s left' },
  ])('STATUS= line: $want', ({ p, now, want }) => {
    expect(stopStatusLine(p, now)).toBe(want);
  });

  // Each row is the next report of one run, in order; extend: ms sent, or undefined for none.
  it.each([
    {
      what: 'the first report extends to the group end plus the allowance',
      steps: [{ p: base, now: T0, extend: 23_000 }],
    },
    {
      what: 'no progress, no extension; a guest off or a new group extends again',
      steps: [
        { p: base, now: T0, extend: 23_000 },
        { p: base, now: T0 + 5000, extend: undefined },
        { p: { ...base, runningInGroup: 1, finished: 1 }, now: T0 + 6000, extend: 17_000 },
        { p: { ...base, runningInGroup: 1, finished: 1 }, now: T0 + 9000, extend: undefined },
        { p: { ...base, group: 2, groupDeadlineAt: T0 + 40_000, finished: 2 }, now: T0 + 21_000, extend: 22_000 },
      ],
    },
    {
      what: 'never past the run bound plus the allowance',
      steps: [{ p: { ...base, groupDeadlineAt: T0 + 90_000 }, now: T0, extend: 63_000 }],
    },
    {
      what: 'a drain runs outside any stop job: never extended',
      steps: [{ p: { ...base, kind: 'drain' as const }, now: T0, extend: undefined }],
    },
  ])('EXTEND_TIMEOUT_USEC: $what', ({ steps }) => {
    const gate = new TimeoutExtension(3000);
    for (const s of steps) expect(gate.next(s.p, s.now)).toBe(s.extend);
  });
});
