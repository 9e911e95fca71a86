import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawnAgent, type AgentProcess } from '../../support/agent-process.js';
import { waitFor } from '../../support/wait.js';
import { listMachines, machineProp, manager, startRig, type Rig } from './helpers.js';

// The kill -9 suite never stops the agent cleanly, so it never has a record snapshot to load. Here
// a clean stop writes one, the next agent takes its records from it, changes them (its own
// reconciling and acknowledged calls), and is killed: the next start finds a stale snapshot, record
// files that trail the record journal, and the journal itself. Every acknowledged change must come
// back, twice over, and a clean stop after that must again give a snapshot the next start uses.

const SPEC = JSON.stringify({ cpus: 1, memoryMiB: 64, disks: [{ name: 'root', sizeGiB: 1 }], power: 'off' });
const MACHINES = Array.from({ length: 12 }, (_, i) => `snap-${i}`);

let rig: Rig;
let agent: AgentProcess | undefined;

async function start(): Promise<AgentProcess> {
  agent = spawnAgent(rig.opts);
  await agent.ready(60_000);
  return agent;
}

async function ok(member: string, signature: string, body: unknown[]): Promise<void> {
  const res = await manager(rig.client, member, signature, body, 20_000);
  if (!res.ok) throw new Error(`${member} ${JSON.stringify(body)}: ${res.errorName}: ${res.message}`);
}

const DELETING = ['terminating', 'terminated'];

/**
 * Name to its "round" annotation for every machine, once no deletion is left under way (a
 * zero-grace one cut by the kill ends soon after the start): a machine that vanished between the
 * listing and its Get would fail the read for nothing.
 */
async function rounds(): Promise<Map<string, string>> {
  let listed: Array<[string, string, string, string]> = [];
  await waitFor(async () => {
    listed = await listMachines(rig.client);
    return listed.every(([, state]) => !DELETING.includes(state));
  }, { timeoutMs: 20_000, what: 'every deletion under way to end' });
  const seen = new Map<string, string>();
  for (const [name] of listed) {
    seen.set(name, ((await machineProp(rig.client, name, 'Annotations')) as Record<string, string>).round ?? '');
  }
  return seen;
}

/** How many records the last start took from the snapshot, from its "loaded" line (0 without one). */
const fromSnapshot = (output: string) => Number(/\((\d+) unchanged since the last clean stop/.exec(output)?.[1] ?? 0);

describe('a kill -9 after a start from the record snapshot', () => {
  beforeAll(async () => {
    rig = await startRig({ prefix: 'vmk-snapcrash-', startAgent: false });
  }, 60_000);

  afterAll(async () => {
    await agent?.stop('SIGKILL');
    await rig?.stop();
  });

  it('loses no acknowledged change to a stale snapshot, over two kills, and snapshots again at the next clean stop', async () => {
    const expected = new Map<string, string>();
    await start();
    for (const name of MACHINES) {
      await ok('CreateMachine', 'ss', [name, SPEC]);
      expected.set(name, '');
    }
    expect((await agent!.stop('SIGTERM')).code).toBe(0);

    for (let kill = 1; kill <= 2; kill++) {
      await start();
      // After the clean stop every record comes from the snapshot; after the first kill only the
      // ones whose files the killed agent did not rewrite (the snapshot is stale for the rest).
      const taken = fromSnapshot(agent!.output());
      if (kill === 1) expect(taken, 'the start after a clean stop takes every record from the snapshot').toBe(MACHINES.length);
      else expect(taken, 'the start after a kill still takes the unchanged records from the stale snapshot').toBeGreaterThan(0);
      expect(await rounds()).toEqual(expected);
      // Acknowledged changes, the last of them moments before the kill: its record file trails
      // the journal (written within the file lag), and the snapshot knows the older file.
      const victim = MACHINES[kill]!;
      await ok('DeleteMachineWithGracePeriod', 'su', [victim, 0]);
      expected.delete(victim);
      const added = `late-${kill}`;
      await ok('CreateMachine', 'ss', [added, SPEC]);
      expected.set(added, '');
      // Each kill changes other machines: what the first one changed is only in record files the
      // snapshot does not know (its load checkpointed them) when the second start comes.
      for (const name of [...expected.keys()].slice((kill - 1) * 6, kill * 6)) {
        await ok('SetMachineAnnotations', 'sa{ss}', [name, { round: `kill-${kill}` }]);
        expected.set(name, `kill-${kill}`);
      }
      await agent!.stop('SIGKILL');
    }

    await start();
    expect(await rounds()).toEqual(expected);
    expect((await agent!.stop('SIGTERM')).code).toBe(0);
    await start();
    expect(fromSnapshot(agent!.output()), 'the start after the last clean stop takes every record from the snapshot').toBe(expected.size);
    expect(await rounds()).toEqual(expected);
  }, 180_000);
});
