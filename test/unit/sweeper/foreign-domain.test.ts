import { afterEach, describe, expect, it } from 'vitest';
import { Harness } from '../../support/agent-harness.js';
import { domainNameFor as dom } from '../../../src/machine/names.js';

let h: Harness;
afterEach(async () => {
  await h?.agent.stop();
});

const DOMAIN_OPS = new Set(['shutdownDomain', 'destroyDomain', 'undefineDomain']);

/** Calls that would change the domain: the sweeper must make none on a foreign one. */
const touches = (x: Harness, name: string) => x.hv.calls.filter((c) => c.name === dom(name) && DOMAIN_OPS.has(c.op));

/** A domain with the machine's name but not our mark exists before the machine is created. */
async function machineOverForeignDomain(name: string, state: 'running' | 'shutoff'): Promise<void> {
  h.hv.addDomain(dom(name), state);
  await h.service.create(name, JSON.stringify({ gracePeriodSec: 5, disks: [{ name: 'root', sizeGiB: 1 }] }));
  await h.advance(3000); // the reconciler's first passes (it flags a foreign domain it would have to start)
}

describe('sweeper: a domain with our name that is not ours', () => {
  it.each(['running', 'shutoff'] as const)('deleting the machine (domain %s) removes only its record and files', async (state) => {
    h = await new Harness({ behaviour: 'ignore' }).start();
    await machineOverForeignDomain('f', state);
    const eventsBefore = h.reasons('f').length;
    await h.service.delete('f', 5);
    await h.advanceUntil(() => !h.exists('f'), 30_000);
    expect(touches(h, 'f')).toEqual([]);
    expect(h.hv.stateOf(dom('f'))).toBe(state);
    expect([...h.disks.removed]).toContain('/state/guests/f');
    const after = h.reasons('f').slice(eventsBefore);
    expect(after.filter((r) => r !== 'ForeignDomain')).toEqual(['DeletionRequested', 'Deleted']);
    expect(after.indexOf('ForeignDomain')).toBeGreaterThan(0);
    expect(h.service.events().filter((e) => e.machine === 'f' && e.reason === 'ForeignDomain').at(-1)?.type).toBe('warning');
  });

  it('a power-off leaves the domain alone and the machine in error, no longer tracked', async () => {
    h = await new Harness({ behaviour: 'ignore' }).start();
    await machineOverForeignDomain('g', 'running');
    await h.service.setPower('g', 'off');
    await h.advance(30_000);
    expect(touches(h, 'g')).toEqual([]);
    expect(h.hv.stateOf(dom('g'))).toBe('running');
    expect(h.service.get('g').status).toMatchObject({ state: 'error', forceStopAt: 0, shutdownRequestedAt: 0 });
    expect(h.agent.sweeper.trackedCount).toBe(0);
  });
});
