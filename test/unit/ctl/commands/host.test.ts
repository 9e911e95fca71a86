import { describe, expect, it } from 'vitest';
import { runCli } from '../../../../src/ctl/cli.js';
import { captureIo } from '../../../../src/ctl/io.js';
import type { ShutdownRecordView } from '../../../../src/ctl/model.js';
import { FakeClock, flushMicrotasks } from '../../../support/fakes/fake-clock.js';
import { FakeClient } from '../fake-client.js';

// drain, undrain, shutdowns, and host-level events (machine "") on the fake client.

const T = Date.UTC(2026, 11, 5, 8, 0, 0);

function setup(o: Parameters<typeof captureIo>[0] = {}) {
  const clock = new FakeClock(T);
  const client = new FakeClient();
  const io = captureIo({ columns: 200, ...o });
  const abort = new AbortController();
  const run = (...argv: string[]) => runCli(argv, { io, clock, env: {}, connect: async () => client, signal: abort.signal });
  return { clock, client, io, abort, run };
}

const RECORD: ShutdownRecordView = {
  id: '20261205T080000Z-1',
  kind: 'drain',
  result: 'completed',
  startedAt: T,
  finishedAt: T + 95_000,
  boundSec: 120,
  groups: [
    { minPriority: 100, budgetSec: 30, startedAt: T, finishedAt: T + 20_000 },
    { minPriority: 0, budgetSec: 90, startedAt: T + 20_000, finishedAt: T + 95_000 },
  ],
  machines: [
    { machine: 'db', domain: 'vmkeeper-db', action: 'save', priority: 200, group: 0, result: 'saved', afterMs: 19_000, detail: 'saved to disk' },
    { machine: 'web', domain: 'vmkeeper-web', action: 'shutdown', priority: 0, group: 1, result: 'clean', afterMs: 40_000, detail: '1 ACPI request' },
    { machine: 'stuck', domain: 'vmkeeper-stuck', action: 'shutdown', priority: 0, group: 1, result: 'forced', afterMs: 95_000, detail: 'destroyed at the budget' },
  ],
};

describe('drain', () => {
  it('without --wait asks once and says the state', async () => {
    const s = setup();
    s.client.onDrain = () => void (s.client.info = { ...s.client.info, drainState: 'draining' });
    expect(await s.run('drain')).toBe(0);
    expect(s.client.calls).toEqual(['drain']);
    expect(s.io.stdout).toBe('drain requested (DrainState: draining)\n');
  });

  it('--wait subscribes before the call and prints the run until DrainCompleted (exit 0)', async () => {
    const s = setup();
    s.client.onDrain = () => {
      s.client.info = { ...s.client.info, drainState: 'draining' };
      s.client.event('', 'DrainStarted', 'drain for maintenance', T);
    };
    const done = s.run('drain', '--wait');
    await flushMicrotasks();
    expect(s.client.calls.slice(0, 2)).toEqual(['subscribe', 'drain']);
    s.client.event('db', 'Saved', 'saved to disk', T + 19_000);
    s.client.event('web', 'ShutdownCompleted', 'shut down cleanly', T + 40_000);
    await flushMicrotasks();
    s.client.event('', 'DrainCompleted', 'drained: 1 clean, 1 saved (record 20261205T080000Z-1)', T + 41_000);
    expect(await done).toBe(0);
    const lines = s.io.stdout.trimEnd().split('\n');
    expect(lines[0]).toMatch(/^1 .* \(host\) +DrainStarted /);
    expect(lines[1]).toBe('draining: waiting for every machine to stop');
    expect(lines.slice(2, 4).map((l) => l.split(/\s+/)[3])).toEqual(['db', 'web']);
    expect(lines.some((l) => /\(host\)\s+DrainCompleted\s+agent\s+drained: 1 clean, 1 saved/.test(l))).toBe(true);
    expect(lines.at(-1)).toBe('host drained');
    expect(s.client.subscribers).toBe(0);
  });

  it('--wait ends at once when the host was drained already', async () => {
    const s = setup();
    s.client.info = { ...s.client.info, drainState: 'drained' };
    expect(await s.run('drain', '--wait')).toBe(0);
    expect(s.io.stdout).toBe('host drained\n');
  });

  it('--wait fails with exit 8 when the drain is cancelled by an undrain', async () => {
    const s = setup();
    s.client.onDrain = () => {
      s.client.info = { ...s.client.info, drainState: 'draining' };
      s.client.event('', 'DrainStarted', 'drain', T);
    };
    const done = s.run('drain', '--wait');
    await flushMicrotasks();
    s.client.event('', 'DrainCancelled', 'drain cancelled', T + 1000);
    expect(await done).toBe(8);
    expect(s.io.stderr).toContain('the drain was cancelled (DrainCancelled)');
  });

  it('--wait --json prints one event per line', async () => {
    const s = setup();
    s.client.onDrain = () => s.client.event('', 'DrainCompleted', 'drained: no machines', T);
    expect(await s.run('--json', 'drain', '--wait')).toBe(0);
    expect(JSON.parse(s.io.stdout.trim())).toMatchObject({ machine: '', reason: 'DrainCompleted', sequence: 1 });
  });

  it('ShuttingDown is a conflict (exit 7) with the agent\'s line', async () => {
    const s = setup();
    const { DBusError } = await import('dbus-next');
    s.client.onDrain = () => {
      throw new DBusError('org.vmkeeper1.Error.ShuttingDown', 'the agent is shutting down and accepts no new work');
    };
    expect(await s.run('drain')).toBe(7);
    expect(s.io.stderr).toBe('vmkeeperctl: the agent is shutting down and accepts no new work\n');
  });

  it('Ctrl-C during --wait says the drain goes on (exit 130)', async () => {
    const s = setup();
    s.client.onDrain = () => void (s.client.info = { ...s.client.info, drainState: 'draining' });
    const done = s.run('drain', '--wait');
    await flushMicrotasks();
    s.abort.abort();
    expect(await done).toBe(130);
    expect(s.io.stderr).toContain('the drain goes on');
  });
});

describe('undrain', () => {
  it('asks once and says so', async () => {
    const s = setup();
    expect(await s.run('undrain')).toBe(0);
    expect(s.client.calls).toEqual(['undrain']);
    expect(s.io.stdout).toBe('undrained: machines start again\n');
  });
});

describe('shutdowns', () => {
  it('lists the records with counts per result', async () => {
    const s = setup();
    s.client.shutdownRecords = [RECORD, { ...RECORD, id: '20261205T090000Z-2', kind: 'host-shutdown', result: 'in-progress', finishedAt: 0, machines: [] }];
    expect(await s.run('shutdowns')).toBe(0);
    const [header, first, second] = s.io.stdout.trimEnd().split('\n');
    expect(header!.split(/\s+/)).toEqual(['ID', 'KIND', 'RESULT', 'STARTED', 'ENDED', 'CLEAN', 'SAVED', 'FORCED', 'FAILED', 'LEFT-RUNNING']);
    expect(first!.split(/\s+/)).toEqual(['20261205T080000Z-1', 'drain', 'completed', '2026-12-05T08:00:00Z', '2026-12-05T08:01:35Z', '1', '1', '1', '0', '0']);
    expect(second!.split(/\s+/)).toEqual(['20261205T090000Z-2', 'host-shutdown', 'in-progress', '2026-12-05T08:00:00Z', '-', '0', '0', '0', '0', '0']);
  });

  it('--json lists the counts; none kept says so on stderr', async () => {
    const s = setup();
    s.client.shutdownRecords = [RECORD];
    expect(await s.run('--json', 'shutdowns')).toBe(0);
    expect(JSON.parse(s.io.stdout)).toEqual([
      { id: RECORD.id, kind: 'drain', result: 'completed', startedAt: T, finishedAt: T + 95_000, counts: { clean: 1, saved: 1, forced: 1, failed: 0, 'left-running': 0 } },
    ]);
    const e = setup();
    expect(await e.run('shutdowns')).toBe(0);
    expect(e.io.stderr).toBe('No shutdown records.\n');
  });

  it('ID shows the groups in order and each machine', async () => {
    const s = setup();
    s.client.shutdownRecords = [RECORD];
    expect(await s.run('shutdowns', RECORD.id)).toBe(0);
    const out = s.io.stdout;
    expect(out).toContain('Record: 20261205T080000Z-1\nKind: drain\nResult: completed\n');
    expect(out).toContain('Ended: 2026-12-05T08:01:35Z (1m35s)\n');
    expect(out).toContain('Machines: 1 clean, 1 saved, 1 forced\n');
    const groupRows = out.split('Groups (stopped in this order):\n')[1]!.split('\n\n')[0]!.split('\n').slice(1);
    expect(groupRows.map((l) => l.split(/\s+/).slice(0, 3))).toEqual([['0', '100', '30s'], ['1', '0', '90s']]);
    const machineRows = out.split('Machines:\n')[1]!.trimEnd().split('\n').slice(1);
    expect(machineRows.map((l) => l.split(/\s+/).slice(0, 6))).toEqual([
      ['db', 'save', '200', '0', 'saved', '19s'],
      ['web', 'shutdown', '0', '1', 'clean', '40s'],
      ['stuck', 'shutdown', '0', '1', 'forced', '1m35s'],
    ]);
  });

  it('an unknown ID is exit 3 with the agent\'s line; --json prints the record', async () => {
    const s = setup();
    expect(await s.run('shutdowns', 'nope')).toBe(3);
    expect(s.io.stderr).toBe('vmkeeperctl: no shutdown record with id "nope"\n');
    const j = setup();
    j.client.shutdownRecords = [RECORD];
    expect(await j.run('--json', 'shutdowns', RECORD.id)).toBe(0);
    expect(JSON.parse(j.io.stdout)).toEqual(RECORD);
  });
});

describe('events with host-level events', () => {
  it('shows machine "" as (host)', async () => {
    const s = setup();
    s.client.event('', 'DrainStarted', 'drain for maintenance', T);
    s.client.event('web', 'ShutdownRequested', 'ACPI shutdown', T);
    expect(await s.run('events')).toBe(0);
    const rows = s.io.stdout.trimEnd().split('\n').slice(1).map((l) => l.split(/\s+/)[3]);
    expect(rows).toEqual(['(host)', 'web']);
  });
});
