import { afterEach, describe, expect, it } from 'vitest';
import { Harness, SPEC } from '../../support/agent-harness.js';

describe('optimistic concurrency and idempotent create', () => {
  let h: Harness;
  afterEach(async () => {
    await h.agent.stop();
  });

  it.each([
    ['setAnnotations', (h: Harness, v: number) => h.service.setAnnotations('m', { a: 'b' }, { expectedVersion: v })],
    ['setPower', (h: Harness, v: number) => h.service.setPower('m', 'off', { expectedVersion: v })],
    ['delete', (h: Harness, v: number) => h.service.delete('m', undefined, { expectedVersion: v })],
  ])('%s with a stale version is a Conflict naming the current one, and changes nothing', async (_name, call) => {
    h = await new Harness().start();
    await h.createRunning('m');
    const current = h.service.get('m').resourceVersion;
    const before = JSON.stringify(h.service.list());
    const writes = h.store.writes;
    await expect(call(h, current - 1)).rejects.toMatchObject({ kind: 'Conflict', message: expect.stringContaining(`version ${current}`) });
    expect(JSON.stringify(h.service.list())).toBe(before);
    expect(h.store.writes).toBe(writes);
    await call(h, current);
    expect(h.service.get('m').resourceVersion).toBeGreaterThan(current);
  });

  it('two writers with the same expected version: one wins, the other gets Conflict', async () => {
    h = await new Harness().start();
    await h.createRunning('m');
    const v = h.service.get('m').resourceVersion;
    const results = await Promise.allSettled([
      h.service.setAnnotations('m', { writer: 'one' }, { expectedVersion: v }),
      h.service.setAnnotations('m', { writer: 'two' }, { expectedVersion: v }),
    ]);
    expect(results.map((r) => r.status).sort()).toEqual(['fulfilled', 'rejected']);
    expect((results.find((r) => r.status === 'rejected') as PromiseRejectedResult).reason).toMatchObject({ kind: 'Conflict' });
  });

  it('0 means any version', async () => {
    h = await new Harness().start();
    await h.createRunning('m');
    await h.service.setAnnotations('m', { a: 'b' }, { expectedVersion: 0 });
    expect(h.service.get('m').annotations).toEqual({ a: 'b' });
  });

  it('a repeated create with the same spec returns the machine it made, once; another spec is MachineExists', async () => {
    h = await new Harness().start();
    const first = await h.service.create('m', SPEC);
    const reordered = JSON.stringify({ disks: [{ sizeGiB: 1, name: 'root' }], memoryMiB: 128, cpus: 1 });
    const again = await h.service.create('m', reordered);
    expect(again.uuid).toBe(first.uuid);
    expect(h.reasons('m').filter((r) => r === 'Created')).toHaveLength(1);
    await expect(h.service.create('m', JSON.stringify({ cpus: 2, memoryMiB: 128, disks: [{ name: 'root', sizeGiB: 1 }] }))).rejects.toMatchObject({ kind: 'MachineExists' });
  });

  it('events name the caller who caused them; the agent\'s own name none', async () => {
    h = await new Harness().start();
    await h.service.create('m', SPEC, { actor: { uid: 1000, call: 'CreateMachine' } });
    await h.advanceUntil(() => h.service.get('m').status.state === 'running');
    await h.service.setPower('m', 'off', { actor: { uid: 0, call: 'SetMachinePowerIfVersion' } });
    await h.service.setAnnotations('m', { a: 'b' }, { actor: { uid: 7, call: 'SetMachineAnnotations' } });
    const events = h.service.eventsSince(0, 'm', 100).events;
    expect(events.find((e) => e.reason === 'Created')?.actor).toEqual({ uid: 1000, call: 'CreateMachine' });
    expect(events.find((e) => e.reason === 'PowerChanged')?.actor).toEqual({ uid: 0, call: 'SetMachinePowerIfVersion' });
    expect(events.find((e) => e.reason === 'AnnotationsChanged')?.actor).toEqual({ uid: 7, call: 'SetMachineAnnotations' });
    const started = events.find((e) => e.reason === 'Started');
    expect(started).toBeDefined();
    expect(started!.actor).toBeUndefined();
  });
});
