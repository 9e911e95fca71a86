import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawnAgent, type AgentProcess } from '../../support/agent-process.js';
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

/** Name to its "round" annotation, for every machine the agent lists and is not deleting. */
async function rounds(): Promise<Map<string, string>> {
  const seen = new Map<string, string>();
  for (const [name] of await listMachines(rig.client)) {
    if (Number(await machineProp(rig.client, name, 'DeletionTimestamp')) > 0) continue;
    seen.set(name, ((await machineProp(rig.client, name, 'Annotations')) as Record<string, string>).round ?? '');
  }
  return seen;
}

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
      expect(agent!.output(), 'the start after a clean stop takes its records from the snapshot').toMatch(
        kill === 1 ? new RegExp(`loaded ${MACHINES.length} machine records .*\\(${MACHINES.length} unchanged since the last clean stop`) : /loaded \d+ machine records/,
      );
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
    expect(agent!.output()).toMatch(/\(\d+ unchanged since the last clean stop, taken from its snapshot\)/);
    expect(await rounds()).toEqual(expected);
  }, 180_000);
});
