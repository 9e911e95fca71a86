// Sweeper numbers on the fake hypervisor with the real clock and the real file store:
//   - force-stop lateness after forceStopAt over 200 ignoring guests
//   - time from a cooperating guest's power-off to its record being gone
//   - cost of one sweep pass with 10,000 machines of which 100 are being deleted
// Run: npx tsx bench/sweeper.bench.ts
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Agent } from '../src/agent.js';
import { defaultConfig } from '../src/config/config.js';
import { FakeHypervisor } from '../test/support/fakes/fake-hypervisor.js';
import { FakeDiskProvisioner } from '../test/support/fakes/fake-disks.js';
import { systemClock } from '../src/lifecycle/clock.js';
import { silentLogger } from '../src/logging/logger.js';
import { recordsDir } from '../src/machine/paths.js';
import { domainNameFor } from '../src/machine/names.js';
import { FileMachineStore } from '../src/store/file-store.js';
import { waitFor } from '../test/support/wait.js';
import { summary } from './common.js';

const SPEC = JSON.stringify({ cpus: 1, memoryMiB: 128, disks: [{ name: 'root', sizeGiB: 1 }] });

process.env.UV_THREADPOOL_SIZE ??= '16';

async function makeAgent(stateDir: string, behaviour: 'obey' | 'ignore', tune?: (c: ReturnType<typeof defaultConfig>) => void) {
  const config = defaultConfig();
  config.stateDir = stateDir;
  config.imageDirectories = [path.join(stateDir, 'images')];
  tune?.(config);
  const hv = new FakeHypervisor({ clock: systemClock, defaultBehaviour: behaviour, shutdownDelayMs: 50 });
  const store = new FileMachineStore({ dir: recordsDir(stateDir), logger: silentLogger });
  const agent = new Agent({ config, clock: systemClock, logger: silentLogger, store, hypervisor: hv, disks: new FakeDiskProvisioner() });
  await agent.start();
  return { agent, hv };
}

async function createRunning(agent: Agent, names: string[]) {
  for (const n of names) await agent.service.create(n, SPEC);
  await waitFor(() => names.every((n) => agent.service.get(n).status.state === 'running'), { timeoutMs: 120_000, intervalMs: 5, what: 'machines to run' });
}

async function forceStopLateness(dir: string): Promise<void> {
  const { agent } = await makeAgent(dir, 'ignore');
  const names = Array.from({ length: 200 }, (_, i) => `late-${i}`);
  await createRunning(agent, names);
  // Deadlines spread over 2-4 s so they do not all fall in one millisecond.
  await Promise.all(names.map((n, i) => agent.service.delete(n, 2 + (i % 3))));
  const deadlines = new Map(names.map((n) => [n, agent.service.get(n).status.forceStopAt]));
  await waitFor(() => agent.service.list().length === 0, { timeoutMs: 60_000, intervalMs: 5, what: 'all deletions' });
  const forced = agent.service.events().filter((e) => e.reason === 'ForceStopped');
  const issued = forced.map((e) => Number(/issued (\d+) ms/.exec(e.message)![1]));
  console.log(summary('force-stop lateness: destroy issued after forceStopAt (200 ignoring guests, fake hypervisor, real clock, file store)', issued));
  console.log(summary('force-stop lateness: ForceStopped event after forceStopAt (includes the record write)', forced.map((e) => e.timestamp - deadlines.get(e.machine)!)));
  await agent.stop();
}

async function powerOffToGone(dir: string): Promise<void> {
  const { agent, hv } = await makeAgent(dir, 'obey');
  const names = Array.from({ length: 50 }, (_, i) => `coop-${i}`);
  await createRunning(agent, names);
  const offAt = new Map<string, number>();
  const goneAt = new Map<string, number>();
  agent.service.on('machineRemoved', (r) => goneAt.set(r.name, Date.now()));
  await Promise.all(names.map((n) => agent.service.delete(n, 60)));
  // The fake guest powers off 50 ms after the request; find that moment by watching its state.
  await waitFor(() => {
    for (const n of names) if (!offAt.has(n) && hv.stateOf(domainNameFor(n)) !== 'running') offAt.set(n, Date.now());
    return goneAt.size === names.length;
  }, { timeoutMs: 60_000, intervalMs: 5, what: 'records to go' });
  console.log(summary('guest power-off to record gone (50 cooperating guests, poll interval 1 s)', names.map((n) => goneAt.get(n)! - offAt.get(n)!)));
  await agent.stop();
}

async function sweepPassCost(dir: string): Promise<void> {
  const { agent } = await makeAgent(dir, 'ignore', (c) => (c.machines.sweepIntervalSec = 3600));
  const names = Array.from({ length: 10_000 }, (_, i) => `m-${String(i).padStart(5, '0')}`);
  const t0 = Date.now();
  await Promise.all(names.map((n) => agent.service.create(n, SPEC)));
  await waitFor(() => names.every((n) => agent.records.get(n)?.status.state === 'running'), { timeoutMs: 600_000, intervalMs: 1000, what: '10,000 machines' });
  console.log(`created 10,000 machines in ${Date.now() - t0} ms`);
  await Promise.all(names.slice(0, 100).map((n) => agent.service.delete(n, 3600)));
  await new Promise((r) => setTimeout(r, 500));
  const costs: number[] = [];
  for (let i = 0; i < 50; i++) {
    const start = process.hrtime.bigint();
    const stats = await agent.sweeper.sweepOnce();
    costs.push(Number(process.hrtime.bigint() - start) / 1e6);
    if (stats.machines !== 100) throw new Error(`sweep saw ${stats.machines} machines, expected 100`);
  }
  console.log(summary('sweep pass (10,000 machines, 100 being deleted)', costs));
  await agent.stop();
}

const dir = mkdtempSync(path.join(tmpdir(), 'vmkeeper-bench-'));
try {
  await forceStopLateness(path.join(dir, 'a'));
  await powerOffToGone(path.join(dir, 'b'));
  await sweepPassCost(path.join(dir, 'c'));
} finally {
  rmSync(dir, { recursive: true, force: true });
}
process.exit(0);
