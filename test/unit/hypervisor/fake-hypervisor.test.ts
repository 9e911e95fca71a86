import { describe, expect, it } from 'vitest';
import { FakeDiskProvisioner } from '../../support/fakes/fake-disks.js';
import { FakeHypervisor, type GuestBehaviour } from '../../support/fakes/fake-hypervisor.js';
import { FakeClock, flushMicrotasks } from '../../support/fakes/fake-clock.js';
import { isAgentError } from '../../../src/machine/errors.js';
import { descriptionFor, runHypervisorContract } from '../../contract/hypervisor-contract.js';

runHypervisorContract('FakeHypervisor', async () => ({ hv: new FakeHypervisor(), cleanup: async () => {} }));

async function runningDomain(opts: { behaviour?: GuestBehaviour; delayMs?: number } = {}) {
  const clock = new FakeClock();
  const hv = new FakeHypervisor({ clock, defaultBehaviour: opts.behaviour, shutdownDelayMs: opts.delayMs });
  const def = descriptionFor('guest');
  await hv.defineDomain(def);
  await hv.startDomain(def.domainName);
  return { clock, hv, name: def.domainName };
}

describe('FakeHypervisor guest behaviour', () => {
  it('obey: shuts off after the delay on the injected clock', async () => {
    const { clock, hv, name } = await runningDomain({ delayMs: 2000 });
    await hv.shutdownDomain(name);
    await hv.shutdownDomain(name);
    await clock.advance(1999);
    expect(hv.stateOf(name)).toBe('running');
    await clock.advance(1);
    expect(hv.stateOf(name)).toBe('shutoff');
    expect(hv.shutdownRequests(name)).toBe(2);
  });

  it('ignore: counts requests and stays running until destroyed', async () => {
    const { clock, hv, name } = await runningDomain({ behaviour: 'ignore' });
    for (let i = 0; i < 3; i++) await hv.shutdownDomain(name);
    await clock.advance(60_000);
    expect(hv.stateOf(name)).toBe('running');
    expect(hv.shutdownRequests(name)).toBe(3);
    await hv.destroyDomain(name);
    expect(hv.stateOf(name)).toBe('shutoff');
  });

  it('hang: destroy does not settle until released', async () => {
    const { hv, name } = await runningDomain();
    hv.setGuestBehaviour(name, 'hang');
    await hv.shutdownDomain(name);
    let settled = false;
    const destroy = hv.destroyDomain(name).then(() => (settled = true));
    await flushMicrotasks();
    expect(settled).toBe(false);
    expect(hv.pendingDestroys(name)).toBe(1);
    expect(hv.stateOf(name)).toBe('running');
    hv.release(name);
    await destroy;
    expect(hv.stateOf(name)).toBe('shutoff');
  });

  it('a destroy cancels a pending obeying shutdown', async () => {
    const { clock, hv, name } = await runningDomain({ delayMs: 1000 });
    await hv.shutdownDomain(name);
    await hv.destroyDomain(name);
    expect(clock.pendingTimers).toBe(0);
  });

  it('undefine of a running domain removes it once it stops, as libvirt does', async () => {
    const { hv, name } = await runningDomain();
    await hv.undefineDomain(name);
    expect(hv.stateOf(name)).toBe('running');
    await hv.destroyDomain(name);
    expect(hv.stateOf(name)).toBeUndefined();
  });
});

describe('FakeHypervisor failure injection', () => {
  it('failNext fails only the next call of that op, in order', async () => {
    const { hv, name } = await runningDomain();
    hv.failNext('shutdownDomain', new Error('one'));
    hv.failNext('shutdownDomain', new Error('two'));
    await expect(hv.shutdownDomain(name)).rejects.toThrow('one');
    await expect(hv.destroyDomain(name)).resolves.toBeUndefined();
    await expect(hv.shutdownDomain(name)).rejects.toThrow('two');
    await expect(hv.shutdownDomain(name)).resolves.toBeUndefined();
  });

  it('setAvailable(false) fails every call with HypervisorUnavailable', async () => {
    const { hv, name } = await runningDomain();
    await hv.connect();
    hv.setAvailable(false);
    expect(hv.isConnected()).toBe(false);
    for (const call of [() => hv.connect(), () => hv.listDomains(), () => hv.destroyDomain(name), () => hv.domainIdentity(name)]) {
      const err = await call().then(() => undefined, (e: unknown) => e);
      expect(isAgentError(err, 'HypervisorUnavailable')).toBe(true);
    }
    hv.setAvailable(true);
    await hv.connect();
    expect(hv.isConnected()).toBe(true);
  });

  it('logs calls with op and name', async () => {
    const { hv, name } = await runningDomain();
    await hv.listDomains();
    expect(hv.calls).toEqual([
      { op: 'defineDomain', name },
      { op: 'startDomain', name },
      { op: 'listDomains' },
    ]);
  });
});

describe('FakeHypervisor descriptions', () => {
  it('keeps what a domain was defined from, and marks it for that machine', async () => {
    const { hv, name } = await runningDomain();
    expect(hv.descriptionOf(name)).toMatchObject({ domainName: name, machineName: 'guest' });
    expect(await hv.domainIdentity(name)).toEqual({ uuid: hv.uuidOf(name), machineName: 'guest' });
  });

  it('a domain added without a description carries no mark; with one, it takes the given name and UUID', async () => {
    const hv = new FakeHypervisor();
    hv.addDomain('vmkeeper-by-hand', 'running', '11111111-2222-3333-4444-555555555555');
    expect(await hv.domainIdentity('vmkeeper-by-hand')).toEqual({ uuid: '11111111-2222-3333-4444-555555555555', machineName: undefined });
    expect(hv.descriptionOf('vmkeeper-by-hand')).toBeUndefined();
    hv.addDomain('vmkeeper-copy', 'shutoff', '66666666-7777-8888-9999-000000000000', descriptionFor('donor'));
    expect(hv.descriptionOf('vmkeeper-copy')).toMatchObject({ domainName: 'vmkeeper-copy', uuid: '66666666-7777-8888-9999-000000000000', machineName: 'donor' });
  });
});

describe('FakeDiskProvisioner', () => {
  it('records created and removed paths; removing a folder takes its files', async () => {
    const disks = new FakeDiskProvisioner();
    await disks.ensureDir('/s/guests/a');
    await disks.createDisk('/s/guests/a/disk-root.qcow2', { backingImage: '/img/base.qcow2' });
    await disks.createDisk('/s/guests/b/disk-root.qcow2', { sizeGiB: 1 });
    await disks.removePath('/s/guests/a');
    expect([...disks.created]).toEqual(['/s/guests/b/disk-root.qcow2']);
    expect([...disks.removed]).toEqual(['/s/guests/a']);
    expect([...disks.dirs]).toEqual(['/s/guests/a']);
  });

  it('fileExists sees files put or created; renameFile moves one and refuses a missing one', async () => {
    const disks = new FakeDiskProvisioner();
    disks.putFile('/s/guests/a/saved-state');
    expect(await disks.fileExists('/s/guests/a/saved-state')).toBe(true);
    await disks.renameFile('/s/guests/a/saved-state', '/s/guests/a/saved-state.failed');
    expect(await disks.fileExists('/s/guests/a/saved-state')).toBe(false);
    expect(await disks.fileExists('/s/guests/a/saved-state.failed')).toBe(true);
    await expect(disks.renameFile('/s/guests/a/saved-state', '/s/guests/a/x')).rejects.toThrow(/ENOENT/);
  });

  it('failNext fails the next call of that op', async () => {
    const disks = new FakeDiskProvisioner();
    disks.failNext('createDisk', new Error('disk full'));
    await expect(disks.createDisk('/x', { sizeGiB: 1 })).rejects.toThrow('disk full');
    await expect(disks.createDisk('/x', { sizeGiB: 1 })).resolves.toBeUndefined();
    expect(disks.created.has('/x')).toBe(true);
  });
});
