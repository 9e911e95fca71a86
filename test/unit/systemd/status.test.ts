import { afterEach, describe, expect, it } from 'vitest';
import { formatStatus, StatusReporter } from '../../../src/systemd/status.js';
import { notifierFrom } from '../../../src/systemd/notifier.js';
import { Harness } from '../../support/agent-harness.js';
import { makeRecord } from '../../support/records.js';

describe('STATUS= line', () => {
  it('counts machines by what an operator cares about', () => {
    const recs = [
      makeRecord('a', { status: { ...makeRecord('a').status, state: 'running' } }),
      makeRecord('b', { status: { ...makeRecord('b').status, state: 'running' } }),
      makeRecord('c', { deletionTimestamp: 1, status: { ...makeRecord('c').status, state: 'terminating' } }),
      makeRecord('d', { status: { ...makeRecord('d').status, state: 'stopping' } }),
      makeRecord('e', { status: { ...makeRecord('e').status, state: 'error' } }),
    ];
    expect(formatStatus({ info: { state: 'running', libvirtConnected: true }, records: recs, lastSweepAt: Date.UTC(2026, 0, 1, 16, 40, 12) }))
      .toBe('running: 5 machines, 2 running, 1 deleting, 1 powering off, 1 in error; last sweep 16:40:12 UTC');
    expect(formatStatus({ info: { state: 'degraded', libvirtConnected: false }, records: [], lastSweepAt: 0 }))
      .toBe('degraded (libvirt unreachable, retrying): 0 machines, 0 running, 0 deleting, 0 powering off; no sweep yet');
  });
});

describe('StatusReporter', () => {
  let h: Harness;
  afterEach(async () => {
    await h?.agent.stop();
  });

  it('sends STATUS= when machines change (debounced) and not when nothing did', async () => {
    h = await new Harness().start();
    const sent: string[] = [];
    const r = new StatusReporter({ api: h.service, notifier: notifierFrom((s) => sent.push(s), 0), clock: h.clock, lastSweepAt: () => 0, debounceMs: 250, refreshMs: 5000 });
    r.start();
    expect(sent).toEqual(['STATUS=running: 0 machines, 0 running, 0 deleting, 0 powering off; no sweep yet']);
    await h.advance(20_000);
    expect(sent).toHaveLength(1); // periodic refreshes with no change send nothing
    await h.createRunning('web');
    await h.advance(300);
    expect(sent.at(-1)).toBe('STATUS=running: 1 machines, 1 running, 0 deleting, 0 powering off; no sweep yet');
    await h.service.delete('web', 30);
    await h.advance(300);
    expect(sent.at(-1)).toMatch(/1 deleting/);
    r.setOverride('host shutdown: 1 of 1 guests still running');
    expect(sent.at(-1)).toMatch(/^STATUS=host shutdown: 1 of 1 guests still running \| running: /);
    r.stop();
  });

  it('stop progress: the group line in STATUS=, the stop timeout extended only on progress', async () => {
    h = await new Harness().start();
    const sent: string[] = [];
    const r = new StatusReporter({ api: h.service, notifier: notifierFrom((s) => sent.push(s), 0), clock: h.clock, lastSweepAt: () => 0 });
    r.start();
    const now = h.clock.now();
    const p = { kind: 'host-shutdown' as const, group: 1, groups: 2, minPriority: 100, guestsInGroup: 2, runningInGroup: 2, groupDeadlineAt: now + 30_000, runDeadlineAt: now + 60_000, finished: 0, total: 3 };
    r.stopProgress(p, 1000);
    expect(sent.at(-2)).toMatch(/^STATUS=host shutdown: group 1\/2 \(priority >= 100\): 2 of 2 guests still running, 30 s left \| running: /);
    expect(sent.at(-1)).toBe('EXTEND_TIMEOUT_USEC=31000000');
    await h.clock.advance(4000);
    r.stopProgress(p, 1000); // nothing went off: no extension
    expect(sent.at(-1)).toMatch(/^STATUS=host shutdown: group 1\/2 \(priority >= 100\): 2 of 2 guests still running, 26 s left/);
    r.stopProgress({ ...p, runningInGroup: 1, finished: 1 }, 1000);
    expect(sent.filter((s) => s.startsWith('EXTEND_TIMEOUT_USEC='))).toEqual(['EXTEND_TIMEOUT_USEC=31000000', 'EXTEND_TIMEOUT_USEC=27000000']);
    r.stop();
  });
});
