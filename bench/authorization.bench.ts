// What asking polkit costs a mutating call: SetMachineAnnotations on the real agent (test driver)
// on a system-like bus with the real polkitd and the shipped files, as root, with
// `authorization: bus-policy` and then `polkit`; one caller at a time, then 8 at once. GetMachine
// (never held) is the read baseline. Root only (polkitd and its mount namespace).
// Run: sudo npx tsx bench/authorization.bench.ts   (env VMKEEPER_BENCH_N: calls per measurement, default 300)
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Message, type MessageBus } from 'dbus-next';
import { connectBus } from '../src/dbus/bus-address.js';
import { startAgent } from '../test/support/agent-process.js';
import { POLICY_FILE, PROJECT_ROOT, startSystemBus } from '../test/support/dbus-daemon.js';
import { POLKIT_BUS_POLICY, polkitdUnavailable, startPolkitd } from '../test/support/polkitd.js';
import { percentile } from './common.js';
import { machineName, writeMachines } from './fixtures.js';

const N = Number(process.env.VMKEEPER_BENCH_N ?? 300);
const PARALLEL = 8;

const call = (member: string, signature: string, body: unknown[]) =>
  new Message({ destination: 'org.vmkeeper1', path: '/org/vmkeeper1', interface: 'org.vmkeeper1.Manager', member, signature, body });
const annotate = (i: number) => call('SetMachineAnnotations', 'sa{ss}', [machineName(i % PARALLEL), { owner: `bench-${i}` }]);
const read = (i: number) => call('GetMachine', 's', [machineName(i % PARALLEL)]);

async function sequential(bus: MessageBus, make: (i: number) => Message): Promise<number[]> {
  for (let i = 0; i < 20; i++) await bus.call(make(i)); // warm-up (polkitd's first answer loads its rules)
  const out: number[] = [];
  for (let i = 0; i < N; i++) {
    const t0 = performance.now();
    await bus.call(make(i));
    out.push(performance.now() - t0);
  }
  return out;
}

/** Calls/s with PARALLEL callers, each on its own machine (so the store is not the queue). */
async function parallel(buses: MessageBus[]): Promise<number> {
  const t0 = performance.now();
  await Promise.all(buses.map(async (bus, c) => {
    for (let i = 0; i < N / PARALLEL; i++) await bus.call(annotate(c + i * PARALLEL));
  }));
  return (N / ((performance.now() - t0) / 1000));
}

const fmt = (label: string, v: number[]) => `${label.padEnd(44)} p50=${percentile(v, 50).toFixed(2)} ms p99=${percentile(v, 99).toFixed(2)} ms`;

export async function authorizationBench(): Promise<string[]> {
  const why = polkitdUnavailable();
  if (why) return [`skipped: ${why}`];
  const dir = await mkdtemp(path.join(os.tmpdir(), 'vmk-bench-authz-'));
  const bus = await startSystemBus({ policyFiles: [POLICY_FILE, POLKIT_BUS_POLICY] });
  const polkitd = await startPolkitd({
    busAddress: bus.address,
    dir: path.join(dir, 'polkitd'),
    actionFiles: [path.join(PROJECT_ROOT, 'config/org.vmkeeper1.policy')],
    ruleFiles: [path.join(PROJECT_ROOT, 'config/50-org.vmkeeper1.rules')],
  });
  const lines: string[] = [];
  try {
    for (const mode of ['bus-policy', 'polkit'] as const) {
      const runDir = path.join(dir, mode);
      const { stateDir, imageDir, uri } = await writeMachines(runDir, PARALLEL);
      const configFile = path.join(runDir, 'config.yaml');
      await writeFile(configFile, `authorization: ${mode}\nlog:\n  level: warn\n`);
      const agent = await startAgent({ busAddress: bus.address, stateDir, imageDir, libvirtUri: uri, configFile });
      const clients = await Promise.all(Array.from({ length: PARALLEL }, () => connectBus(bus.address)));
      try {
        lines.push(fmt(`${mode}: GetMachine (read, never held)`, await sequential(clients[0]!, read)));
        lines.push(fmt(`${mode}: SetMachineAnnotations, 1 caller`, await sequential(clients[0]!, annotate)));
        lines.push(`${`${mode}: SetMachineAnnotations, ${PARALLEL} callers`.padEnd(44)} ${(await parallel(clients)).toFixed(0)} calls/s`);
      } finally {
        for (const c of clients) c.disconnect();
        await agent.stop();
      }
    }
  } finally {
    await polkitd.stop();
    await bus.stop();
    await rm(dir, { recursive: true, force: true });
  }
  return lines;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  for (const l of await authorizationBench()) console.log(l);
  process.exit(0);
}
