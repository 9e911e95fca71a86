import { describe, expect, it } from 'vitest';
import type { Hypervisor as NativeHypervisor } from '@unraid/libvirt';
import { StopCoordinator, type GuestOutcome } from '../../../src/hostshutdown/coordinator.js';
import { LibvirtHypervisor } from '../../../src/hypervisor/libvirt/libvirt-hypervisor.js';
import { silentLogger } from '../../../src/logging/logger.js';
import { FakeClock } from '../../support/fakes/fake-clock.js';

// The libvirt adapter runs native calls through a few slots and refuses every call once one has
// timed out ("stuck"). A save holds a slot for its whole length: this runs the coordinator over
// the real adapter on a native fake whose save takes a minute and is aborted by a destroy, as
// libvirt's is, to show the destroy at the budget end gets through only when saves leave a slot free.

interface NativeDomain {
  name: string;
  id: number;
  running: boolean;
  abortSave?: (err: Error) => void;
}

function nativeFake(clock: FakeClock, names: string[], saveMs: number) {
  const domains = new Map<string, NativeDomain>(names.map((name, i) => [name, { name, id: i + 1, running: true }]));
  const handle = (d: NativeDomain) => ({
    getName: async () => d.name,
    shutdown: async () => undefined, // the guest ignores ACPI
    destroy: async () => {
      d.running = false;
      d.abortSave?.(new Error('operation aborted: domain save job: canceled by client'));
    },
    save: (file: string) => new Promise<void>((resolve, reject) => {
      void file;
      const timer = clock.setTimer(saveMs, () => {
        d.running = false;
        d.abortSave = undefined;
        resolve();
      });
      d.abortSave = (err) => {
        timer.cancel();
        d.abortSave = undefined;
        reject(err);
      };
    }),
  });
  const native = {
    connectOpen: async () => undefined,
    connectClose: async () => undefined,
    connectListDomains: async () => [...domains.values()].filter((d) => d.running).map((d) => d.id),
    connectListDefinedDomains: async () => [...domains.values()].filter((d) => !d.running).map((d) => d.name),
    connectListAllDomains: async () => [],
    domainLookupByID: async (id: number) => handle([...domains.values()].find((d) => d.id === id)!),
    domainLookupByName: async (name: string) => handle(domains.get(name)!),
  };
  return { domains, createNative: () => native as unknown as NativeHypervisor };
}

describe('saves through the libvirt adapter', () => {
  it.each([
    { saves: 1, want: { 'vmkeeper-a': 'forced', 'vmkeeper-b': 'forced' }, stuck: false },
    // Both slots held by saves: the destroys never reach libvirt, and the saves outlive their timeout.
    { saves: 2, want: { 'vmkeeper-a': 'failed', 'vmkeeper-b': 'failed' }, stuck: true },
  ])('2 call slots, $saves saves at once: $want', async ({ saves, want, stuck }) => {
    const clock = new FakeClock();
    const native = nativeFake(clock, ['vmkeeper-a', 'vmkeeper-b'], 60_000);
    const hv = new LibvirtHypervisor({ uri: 'test:///fake', callTimeoutMs: 3000, maxConcurrentCalls: 2, logger: silentLogger, clock, createNative: native.createNative });
    expect(hv.callSlots).toBe(2);
    const outcomes: Record<string, GuestOutcome> = {};
    const c = new StopCoordinator({
      hypervisor: hv, clock, logger: silentLogger, retryIntervalMs: 5000, parallelism: 4, maxConcurrentSaves: saves,
      savedStateFile: (m) => `/state/guests/${m}/saved-state`, pollIntervalMs: 500, destroyTimeoutMs: 3000,
      listener: {
        groupStarted: () => undefined, shutdownRequested: () => undefined, saveFailed: () => undefined,
        finished: (g, o) => void (outcomes[g.domain] = o), groupEnded: async () => undefined, progress: () => undefined,
      },
    });
    const t0 = clock.now();
    const guests = ['vmkeeper-a', 'vmkeeper-b'].map((domain) => ({ machine: domain, domain, action: 'save' as const, priority: 0 }));
    let done = false;
    void c.run([{ minPriority: 0, budgetSec: 10, guests }], t0, t0 + 120_000).finally(() => (done = true));
    for (let i = 0; i < 400 && !done; i++) await clock.advance(100);
    expect(done).toBe(true);
    expect(Object.fromEntries(Object.entries(outcomes).map(([k, o]) => [k, o.result]))).toEqual(want);
    if (!stuck) {
      // Both were destroyed by 10 s + the destroys, well before a save could time out.
      expect(Object.values(outcomes).every((o) => o.afterMs < 14_000)).toBe(true);
      expect([...native.domains.values()].every((d) => !d.running)).toBe(true);
      await expect(hv.listDomains()).resolves.toHaveLength(2);
    } else {
      await clock.advance(10_000); // past the saves' own timeout (10 + 3 + 5 s): counted stuck, later calls refused
      await expect(hv.listDomains()).rejects.toThrow(/not attempted: \d+ earlier calls/);
    }
  });
});
