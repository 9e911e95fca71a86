import { existsSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { savedStateFile } from '../../../src/machine/paths.js';
import { busctlGetProperty } from '../../support/busctl.js';
import { bootedAgain, lastTick, READY_LINE, readSerialProgress, waitForSerialLine, waitForTick, whyNotResumed } from '../../support/guest-images.js';
import { MANAGER, QemuRig } from '../../support/qemu-rig.js';
import { waitFor } from '../../support/wait.js';

// Drain and undrain on real qemu guests (TCG) under a private libvirtd, through the real agent:
// a guest saved to disk (high shutdownPriority, low startPriority) and one shut down by ACPI (the
// reverse). The drain stops them group by group; the undrain brings them back in start-priority
// order, the saved one resumed where it was (its serial counter goes on, no second boot).

const isRoot = process.getuid?.() === 0;
const CONFIG = [
  'defaultDomainType: qemu',
  'hostShutdown:',
  '  timeoutSec: 40',
  '  groups:',
  '    - {minPriority: 200, budgetSec: 20}',
  '    - {minPriority: 0, budgetSec: 20}',
  'restore:',
  '  parallelism: 1', // one start at a time: the recorded order is the start order
  '',
].join('\n');
const GUESTS = {
  keeper: { hostShutdownAction: 'save', shutdownPriority: 300, startPriority: 10 },
  plain: { hostShutdownAction: 'shutdown', shutdownPriority: 0, startPriority: 100 },
};

/** One ListEventsSince row: sequence, timestamp (us), machine, type, reason, message, ... */
type EventRow = [number | bigint, number | bigint, string, string, string, string, ...unknown[]];

let rig: QemuRig;

const eventsSince = async (after: number) =>
  ((await rig.call('ListEventsSince', 'ts', [after, ''])).data as [EventRow[], number | bigint])[0]
    .map((e) => ({ seq: Number(e[0]), machine: e[2], reason: e[4] }));
const lastSequence = async () => Number(((await rig.call('ListEventsSince', 'ts', [0, ''])).data as [EventRow[], number | bigint])[1]);
const drainState = async () => (await busctlGetProperty(rig.bus.address, ...MANAGER, 'DrainState')).data;
const label = (e: { machine: string; reason: string }) => `${e.machine || '(host)'} ${e.reason}`;

/** Asserts that `expected` appear in this order among `seen` (other entries may come between). */
function expectInOrder(seen: string[], expected: string[]): void {
  let last = -1;
  for (const entry of expected) {
    const i = seen.indexOf(entry, last + 1);
    expect(i, `${entry} after ${expected.slice(0, expected.indexOf(entry)).join(', ')} in: ${seen.join(', ')}`).toBeGreaterThan(last);
    last = i;
  }
}

describe.skipIf(!isRoot)('drain and undrain on real qemu guests', () => {
  beforeAll(async () => {
    rig = await QemuRig.start([], CONFIG);
  }, 300_000);

  afterAll(async () => {
    await rig?.stop();
  }, 60_000);

  it('Drain saves one guest and shuts the other down, group by group; Undrain brings them back in start-priority order, the saved one resumed', async () => {
    await Promise.all(Object.entries(GUESTS).map(([name, lifecycle]) => rig.createAndBoot(name, 'acpi', lifecycle)));
    const keeperLog = rig.serialLog('keeper');
    await waitForTick(keeperLog, 3, 20_000);

    // --- drain ------------------------------------------------------------------------------
    const beforeDrain = await lastSequence();
    const drain0 = Date.now();
    await rig.call('Drain');
    await waitFor(async () => (await drainState()) === 'drained', { timeoutMs: 60_000, intervalMs: 200, what: 'DrainState drained' });
    const drainMs = Date.now() - drain0;
    expect(await rig.domainState('keeper')).toBe('shut off');
    expect(await rig.domainState('plain')).toBe('shut off');
    const file = savedStateFile(rig.opts.stateDir, 'keeper');
    expect(existsSync(file), file).toBe(true);
    const drained = (await eventsSince(beforeDrain)).map(label);
    expectInOrder(drained, ['(host) DrainStarted', 'keeper Saved', 'plain ShutdownRequested', 'plain ShutdownCompleted', '(host) DrainCompleted']);
    expect(drained.filter((e) => /SaveFailed|ForceStopped|StopFailed/.test(e))).toEqual([]);
    const keeperBefore = await lastTick(keeperLog);
    const plainBefore = await lastTick(rig.serialLog('plain'));

    // The record of the drain.
    const list = (await rig.call('ListShutdownRecords')).data as [Array<[string, string, string, unknown, unknown]>];
    const last = list[0].at(-1)!;
    expect(last.slice(1, 3)).toEqual(['drain', 'completed']);
    const record = JSON.parse(((await rig.call('DescribeShutdownRecord', 's', [last[0]])).data as [string])[0]) as {
      machines: Array<{ machine: string; group: number; result: string }>;
    };
    expect(record.machines.map((m) => [m.machine, m.group, m.result]).sort()).toEqual([['keeper', 0, 'saved'], ['plain', 1, 'clean']]);

    // --- undrain ----------------------------------------------------------------------------
    const beforeUndrain = await lastSequence();
    const undrain0 = Date.now();
    await rig.call('Undrain');
    await waitFor(async () => (await rig.domainState('keeper')) === 'running' && (await rig.domainState('plain')) === 'running', {
      timeoutMs: 60_000, intervalMs: 200, what: 'both guests running again',
    });
    await waitForSerialLine(rig.serialLog('plain'), READY_LINE('acpi'), 60_000);
    await waitForTick(keeperLog, keeperBefore.n + 3, 30_000);
    const undrainMs = Date.now() - undrain0;
    expect(await drainState()).toBe('none');
    const undrained = (await eventsSince(beforeUndrain)).map(label);
    // plain (startPriority 100) before keeper (10); keeper resumed rather than booted.
    expectInOrder(undrained, ['(host) Undrained', 'plain Started', 'keeper Restored']);
    expect(undrained).not.toContain('keeper Started');
    expect(undrained.filter((e) => /RestoreFailed|SavedStateDiscarded/.test(e))).toEqual([]);

    const resumed = await readSerialProgress(keeperLog);
    expect(whyNotResumed(keeperBefore, resumed)).toBeUndefined();
    // READY comes before the first TICK: wait for plain's first tick of its new boot.
    await waitFor(async () => bootedAgain(plainBefore, await readSerialProgress(rig.serialLog('plain'))), {
      timeoutMs: 30_000, intervalMs: 200, what: `plain to tick in a new boot (was boot=${plainBefore.boot})`,
    });
    await waitFor(() => !existsSync(file), { timeoutMs: 10_000, what: 'the saved state removed after the restore' });
    console.log(`drain on real guests: drained in ${drainMs} ms, back in ${undrainMs} ms; keeper counter ${keeperBefore.n} -> ${resumed.ticks.at(-1)!.n}`);
  }, 240_000);
});
