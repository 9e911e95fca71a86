import type { MessageBus } from 'dbus-next';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { closeClient, manager, openClient } from '../reliability/helpers.js';
import { QemuRig, type BusEvent } from '../../support/qemu-rig.js';
import { waitFor } from '../../support/wait.js';

// An operator acts behind the agent's back with virsh on real qemu guests: starts a machine whose
// power is off and destroys one whose power is on. The agent keeps answering and drives both back
// to their desired state, each with its event.

const isRoot = process.getuid?.() === 0;
const GRACE_SEC = 10;
const POLL_MS = 1000; // the agent's default machines.pollIntervalMs
/** Destroying a real qemu process and a busctl round trip, on a 2-core CI machine. */
const MARGIN_MS = 5000;

let rig: QemuRig;
let client: MessageBus;

/** Calls GetMachine in a loop until stopped; keeps the slowest answer and any failure. */
function pollGetMachine(names: string[]) {
  let stopped = false;
  let slowestMs = 0;
  let calls = 0;
  const failures: string[] = [];
  const loop = (async () => {
    while (!stopped) {
      const r = await manager(client, 'GetMachine', 's', [names[calls++ % names.length]], 5000);
      slowestMs = Math.max(slowestMs, r.ms);
      if (!r.ok) failures.push(`${r.errorName}: ${r.message}`);
      await new Promise((resolve) => setTimeout(resolve, 50)); // pacing between calls, not synchronisation
    }
  })();
  return {
    async stop() {
      stopped = true;
      await loop;
      return { slowestMs, calls, failures };
    },
  };
}

describe.skipIf(!isRoot)('changes made behind the agent\'s back on real qemu guests', () => {
  beforeAll(async () => {
    rig = await QemuRig.start();
    client = await openClient(rig.bus.address);
  }, 300_000);

  afterAll(async () => {
    closeClient(client);
    await rig?.stop();
  }, 60_000);

  it('virsh start of a powered-off machine and virsh destroy of a powered-on one: answered throughout, both back in time', async () => {
    await rig.createAndBoot('on-1', 'acpi', { gracePeriodSec: GRACE_SEC });
    await rig.call('CreateMachine', 'ss', ['off-1', rig.spec('acpi', { power: 'off', gracePeriodSec: GRACE_SEC })]);
    await waitFor(async () => (await rig.state('off-1')) === 'stopped', { timeoutMs: 30_000, what: 'off-1 stopped' });
    await waitFor(async () => (await rig.reasons('on-1')).includes('Started'), { timeoutMs: 10_000, what: 'on-1 seen running' });

    const poller = pollGetMachine(['on-1', 'off-1']);
    const t0 = Date.now();
    await rig.virsh(['start', 'vmkeeper-off-1']);
    await rig.virsh(['destroy', 'vmkeeper-on-1']);
    const budgetMs = GRACE_SEC * 1000 + POLL_MS + MARGIN_MS;

    await waitFor(async () => (await rig.state('on-1')) === 'running' && (await rig.domainState('on-1')) === 'running'
      && (await rig.reasons('on-1')).includes('StoppedOutsideAgent'), { timeoutMs: budgetMs, intervalMs: 200, what: 'on-1 running again' });
    const onBackMs = Date.now() - t0;
    await waitFor(async () => (await rig.state('off-1')) === 'stopped' && (await rig.domainState('off-1')) === 'shut off'
      && (await rig.reasons('off-1')).includes('StartedOutsideAgent'), { timeoutMs: Math.max(1, budgetMs - (Date.now() - t0)), intervalMs: 200, what: 'off-1 off again' });
    const offBackMs = Date.now() - t0;
    const answers = await poller.stop();

    expect(answers.failures).toEqual([]);
    expect(answers.calls).toBeGreaterThan(10);
    expect(answers.slowestMs).toBeLessThan(1000);
    const stoppedOutside = (await rig.events('on-1')).find((e) => e[3] === 'StoppedOutsideAgent')!;
    expect(stoppedOutside[2]).toBe('warning');
    expect(stoppedOutside[4]).toMatch(/restarting in 1s/);
    const startedOutside = (await rig.events('off-1')).find((e) => e[3] === 'StartedOutsideAgent')!;
    expect(startedOutside[2]).toBe('warning');
    // Back to off through the sweeper's graceful path: the button first.
    expect(await rig.reasons('off-1')).toContain('ShutdownRequested');
    const after = (e: BusEvent | undefined) => (e ? `${Math.round(Number(e[0]) / 1000 - t0)} ms` : 'never');
    const restarted = (await rig.events('on-1')).filter((e) => e[3] === 'Started').at(-1);
    console.log(`behind the back: StoppedOutsideAgent after ${after(stoppedOutside)}, Started after ${after(restarted)}, `
      + `StartedOutsideAgent after ${after(startedOutside)}; `
      + `on-1 running again after ${onBackMs} ms, off-1 off again after ${offBackMs} ms `
      + `(${(await rig.reasons('off-1')).includes('ForceStopped') ? 'forced at the deadline' : 'by the ACPI button'}); `
      + `${answers.calls} GetMachine calls, slowest ${Math.round(answers.slowestMs)} ms`);
  }, 90_000);
});
