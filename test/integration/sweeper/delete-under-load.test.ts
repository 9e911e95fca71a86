import type { MessageBus } from 'dbus-next';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { waitFor } from '../../support/wait.js';
import {
  closeClient, listEvents, listMachines, machineProp, manager, openClient, startRig, type EventTuple, type Rig,
} from '../reliability/helpers.js';

// Graceful deletion under load, on libvirt's test driver through the real bus: 20 clients, each
// on its own connection, create machines and delete them with a grace of 2 s. Half the clients
// wait for their machine to run before deleting it (the press-before-force half), the other half
// delete at once, racing the reconciler's start (the nothing-starts-after-delete half). The test
// driver turns a domain off at its first ACPI press, so a pressed machine normally completes by
// itself; a force stop is allowed, but only after a press.

const CLIENTS = 20;
const ROUNDS = 5;
const GRACE_SEC = 2;
const SPEC = JSON.stringify({ cpus: 1, memoryMiB: 64, disks: [{ name: 'root', sizeGiB: 1 }], power: 'on' });

/** Each machine's event reasons, in the order the agent recorded them. */
function reasonsByMachine(events: EventTuple[]): Map<string, string[]> {
  const byMachine = new Map<string, string[]>();
  for (const [, machine, , reason] of events) byMachine.set(machine, [...(byMachine.get(machine) ?? []), reason]);
  return byMachine;
}

async function expectOk(what: string, call: Promise<{ ok: boolean; errorName?: string; message?: string }>): Promise<void> {
  const r = await call;
  if (!r.ok) throw new Error(`${what}: ${r.errorName}: ${r.message}`);
}

/** One client: create, (wait until running), delete with grace, ROUNDS times. */
async function client(rig: Rig, index: number, waitForRunning: boolean): Promise<string[]> {
  const bus: MessageBus = await openClient(rig.bus.address);
  const names: string[] = [];
  try {
    for (let round = 0; round < ROUNDS; round++) {
      const name = `load-${index}-${round}`;
      await expectOk(`create ${name}`, manager(bus, 'CreateMachine', 'ss', [name, SPEC], 20_000));
      names.push(name);
      if (waitForRunning) {
        await waitFor(async () => (await machineProp(bus, name, 'State', 5000)) === 'running', { timeoutMs: 20_000, what: `${name} running` });
      }
      await expectOk(`delete ${name}`, manager(bus, 'DeleteMachineWithGracePeriod', 'su', [name, GRACE_SEC], 20_000));
    }
  } finally {
    closeClient(bus);
  }
  return names;
}

describe('sweeper: graceful deletion under load (20 clients, grace 2 s, test driver)', () => {
  let rig: Rig;
  let reasons: Map<string, string[]>;
  let deleted: string[];

  beforeAll(async () => {
    // The project's default intervals: the sweep is a 10 s safety net, so a late first step is real.
    rig = await startRig({ prefix: 'vmk-delete-load-', config: { logLevel: 'info', pollIntervalMs: 1000, sweepIntervalSec: 10, shutdownRetryIntervalSec: 5, resyncIntervalSec: 30 } });
    const started = Date.now();
    deleted = (await Promise.all(Array.from({ length: CLIENTS }, (_, i) => client(rig, i, i % 2 === 0)))).flat();
    await waitFor(async () => (await listMachines(rig.client)).length === 0, { timeoutMs: 30_000, what: 'every machine removed' });
    reasons = reasonsByMachine(await listEvents(rig.client));
    const all = [...reasons.values()];
    const count = (reason: string) => all.filter((r) => r.includes(reason)).length;
    console.log(`delete-under-load: ${deleted.length} machines created and deleted in ${Date.now() - started} ms; ` +
      `started ${count('Started')}, ShutdownRequested ${count('ShutdownRequested')}, ShutdownCompleted ${count('ShutdownCompleted')}, ` +
      `ForceStopped ${count('ForceStopped')}, Deleted ${count('Deleted')}`);
  }, 120_000);

  afterAll(() => rig?.stop());

  it('removes every machine, each with a Deleted event', () => {
    expect(deleted).toHaveLength(CLIENTS * ROUNDS);
    expect(deleted.filter((name) => !reasons.get(name)?.includes('Deleted'))).toEqual([]);
  });

  it('presses the ACPI button before any force stop, and presses every machine that was running', () => {
    const unpressed = deleted.filter((name) => {
      const r = reasons.get(name) ?? [];
      const deletion = r.indexOf('DeletionRequested');
      const wasRunning = r.slice(0, deletion).includes('Started');
      const press = r.indexOf('ShutdownRequested', deletion);
      const force = r.indexOf('ForceStopped');
      return (wasRunning && press < 0) || (force >= 0 && (press < 0 || press > force));
    });
    expect(unpressed.map((name) => `${name}: ${reasons.get(name)?.join(' ')}`)).toEqual([]);
  });

  it('starts no machine after its deletion was requested', () => {
    const startedLate = deleted.filter((name) => {
      const r = reasons.get(name) ?? [];
      return r.indexOf('Started', r.indexOf('DeletionRequested')) >= 0;
    });
    expect(startedLate.map((name) => `${name}: ${reasons.get(name)?.join(' ')}`)).toEqual([]);
  });
});
