// Start-up of the real agent (from source via tsx, libvirt test driver) with N machine records:
// time from spawn to READY=1 on a NOTIFY_SOCKET we create (python3 receiver), and to the bus
// name answering ListMachines.
// Run: npx tsx bench/startup.bench.ts [count=10000]
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { busctlCall } from '../test/support/busctl.js';
import { spawnAgent } from '../test/support/agent-process.js';
import { startSessionBus } from '../test/support/dbus-daemon.js';
import { notifyReceiver, writeMachines } from './fixtures.js';

export async function startupBench(count: number, runs = 3): Promise<string[]> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'vmk-start-'));
  const { stateDir, imageDir, uri } = await writeMachines(dir, count);
  const bus = await startSessionBus();
  const configFile = path.join(dir, 'config.yaml');
  await writeFile(configFile, 'log:\n  level: warn\n');
  const lines: string[] = [];
  try {
    for (let run = 0; run < runs; run++) {
      const sock = path.join(dir, `notify-${run}.sock`);
      const receiver = notifyReceiver(sock);
      await receiver.listening;
      const t0 = Date.now();
      const agent = spawnAgent({ busAddress: bus.address, stateDir, imageDir, libvirtUri: uri, configFile, extraArgs: ['--log-level', 'warn'], env: { NOTIFY_SOCKET: sock } });
      const readyAt = await Promise.race([receiver.ready, agent.exited.then(() => { throw new Error(`agent exited:\n${agent.output()}`); })]);
      let answeredAt = 0;
      for (;;) {
        const ok = await busctlCall(bus.address, '/org/vmkeeper1', 'org.vmkeeper1.Manager', 'GetMachine', 's', ['vm-00000']).then(() => true, () => false);
        if (ok) {
          answeredAt = Date.now();
          break;
        }
        if (Date.now() - t0 > 300_000) throw new Error('no answer within 300 s');
      }
      lines.push(`start-up with ${count} records, run ${run + 1}: READY=1 after ${readyAt - t0} ms, GetMachine answered after ${answeredAt - t0} ms`);
      await agent.stop();
      receiver.stop();
    }
  } finally {
    await bus.stop();
    await rm(dir, { recursive: true, force: true });
  }
  return lines;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  for (const l of await startupBench(Number(process.argv[2] ?? 10_000))) console.log(l);
  process.exit(0);
}
