import { afterEach, describe, expect, it } from 'vitest';
import { Harness, SPEC } from '../../support/agent-harness.js';
import { domainNameFor } from '../../../src/machine/names.js';

let h: Harness;
afterEach(async () => {
  await h?.agent.stop();
});

describe('machine service', () => {
  it('creates a record, defines and starts the domain', async () => {
    h = await new Harness().start();
    const created = await h.service.create('web-1', SPEC);
    expect(created).toMatchObject({ name: 'web-1', domainName: 'vmkeeper-web-1', resourceVersion: 1 });
    expect(created.status.state).toBe('pending');
    await h.advanceUntil(() => h.service.get('web-1').status.state === 'running');
    expect(h.hv.stateOf(domainNameFor('web-1'))).toBe('running');
    expect([...h.disks.created]).toEqual(['/state/guests/web-1/disk-root.qcow2']);
  });

  it.each([
    ['InvalidName', () => h.service.create('Web_1', SPEC)],
    ['InvalidSpec', () => h.service.create('ok', '{"cpus":"two"}')],
    ['MachineExists', () => h.service.create('dup', SPEC.replace('"cpus":1', '"cpus":2'))],
    ['NoSuchMachine', () => h.service.delete('ghost')],
    ['NoSuchMachine', () => h.service.setPower('ghost', 'on')],
    ['InvalidSpec', () => h.service.setPower('dup', 'maybe')],
    ['InvalidSpec', () => h.service.setAnnotations('dup', { 'bad key!': 'x' })],
    ['InvalidArgument', () => h.service.delete('dup', -1)],
  ])('answers %s and changes nothing', async (kind, call) => {
    h = await new Harness().start();
    await h.createRunning('dup');
    const before = JSON.stringify(h.service.list());
    const writes = h.store.writes;
    await expect(call()).rejects.toMatchObject({ kind });
    expect(JSON.stringify(h.service.list())).toBe(before);
    expect(h.store.writes).toBe(writes);
  });

  it('a failed write is a StorageFailure and leaves the record as it was', async () => {
    h = await new Harness().start();
    h.store.failNextWrites(1);
    await expect(h.service.create('a', SPEC)).rejects.toMatchObject({ kind: 'StorageFailure' });
    expect(h.service.list()).toEqual([]);
    await h.service.create('a', SPEC);
    await h.advanceUntil(() => h.service.get('a').status.state === 'running');
    const before = h.service.get('a');
    const events = h.service.events();
    h.store.failNextWrites(1);
    await expect(h.service.delete('a')).rejects.toMatchObject({ kind: 'StorageFailure' });
    expect(h.service.get('a')).toEqual(before);
    // The deletion's event was numbered before the write and is dropped with it.
    expect(h.service.events()).toEqual(events);
    expect(h.service.eventsSince(0, 'a', 100).events.map((e) => e.reason)).not.toContain('DeletionRequested');
    await expect(h.service.setAnnotations('a', { x: 'y' }).then(() => 'ok')).resolves.toBe('ok');
  });

  it('replaces annotations and bumps the resource version', async () => {
    h = await new Harness().start();
    await h.service.create('a', JSON.stringify({ annotations: { owner: 'x' }, disks: [{ name: 'root', sizeGiB: 1 }] }));
    const v = h.service.get('a').resourceVersion;
    await h.service.setAnnotations('a', { team: 'b' });
    expect(h.service.get('a').annotations).toEqual({ team: 'b' });
    expect(h.service.get('a').resourceVersion).toBeGreaterThan(v);
  });

  it('refuses new machines while stopping', async () => {
    h = await new Harness().start();
    h.service.setAgentState('stopping');
    await expect(h.service.create('late', SPEC)).rejects.toMatchObject({ kind: 'ShuttingDown' });
  });

  it('recreates a domain that vanished and keeps records across a restart', async () => {
    h = await new Harness().start();
    await h.createRunning('keep');
    await h.hv.destroyDomain(domainNameFor('keep'));
    await h.hv.undefineDomain(domainNameFor('keep'));
    await h.restart();
    await h.advanceUntil(() => h.hv.stateOf(domainNameFor('keep')) === 'running');
    expect(h.service.get('keep').status.state).toBe('running');
  });

  it('adopts a running domain on start without starting it again', async () => {
    h = await new Harness().start();
    await h.createRunning('adopt');
    const starts = () => h.hv.calls.filter((c) => c.op === 'startDomain').length;
    const before = starts();
    await h.restart();
    await h.advance(3000);
    expect(starts()).toBe(before);
    expect(h.service.get('adopt').status.state).toBe('running');
  });

  it('restarts a guest that powered itself off while its power is on, with backoff on failures', async () => {
    h = await new Harness().start();
    await h.createRunning('bouncy');
    h.hv.failNext('startDomain', new Error('qemu failed to start'));
    h.hv.setState(domainNameFor('bouncy'), 'shutoff');
    await h.advanceUntil(() => h.service.get('bouncy').status.state === 'error');
    expect(h.service.get('bouncy').status.message).toMatch(/qemu failed to start/);
    expect(h.reasons('bouncy')).toContain('ReconcileFailed');
    await h.advanceUntil(() => h.service.get('bouncy').status.state === 'running');
  });

  it('reports a marked domain without a record and leaves it alone', async () => {
    h = await new Harness().start();
    await h.createRunning('orphan');
    h.store.records.delete('orphan');
    await h.restart();
    await h.advance(2000);
    expect(h.reasons('orphan')).toContain('OrphanDomain');
    expect(h.hv.stateOf(domainNameFor('orphan'))).toBe('running');
  });
});
