// One load-generating process: CLIENTS separate dbus-next connections to the agent, each looping
// over reads and writes for DURATION ms. Prints one JSON line with latencies and error counts.
// Usage: node --import tsx bench/load-worker.ts <bus address> <clients> <durationMs> <workerId>
import { DBusError, Message, type MessageBus } from 'dbus-next';
import { connectBus } from '../src/dbus/bus-address.js';
import { machineObjectPath } from '../src/machine/names.js';

export interface WorkerResult {
  worker: string;
  calls: number;
  latencies: Record<string, number[]>;
  errors: Record<string, number>;
}

const [address, clientsArg, durationArg, worker = '0'] = process.argv.slice(2);
const CLIENTS = Number(clientsArg ?? 50);
const DURATION = Number(durationArg ?? 20_000);
const SPEC = JSON.stringify({ cpus: 1, memoryMiB: 64, disks: [{ name: 'root', sizeGiB: 1 }], power: 'off' });

async function call(bus: MessageBus, path: string, iface: string, member: string, signature = '', body: unknown[] = []): Promise<unknown[]> {
  const reply = await bus.call(new Message({ destination: 'org.vmkeeper1', path, interface: iface, member, signature, body }));
  return reply?.body ?? [];
}

async function main(): Promise<void> {
  const result: WorkerResult = { worker, calls: 0, latencies: {}, errors: {} };
  const record = (op: string, ms: number) => (result.latencies[op] ??= []).push(Math.round(ms * 100) / 100);
  const buses: MessageBus[] = [];
  for (let i = 0; i < CLIENTS; i++) {
    const bus = await connectBus(address!);
    bus.on('error', () => {});
    buses.push(bus);
  }
  const deadline = Date.now() + DURATION;
  let serial = 0;
  const clientLoop = async (bus: MessageBus, i: number) => {
    const own = `w${worker}-c${i}`;
    const timed = async (op: string, fn: () => Promise<unknown>, expected: string[] = []) => {
      const t0 = performance.now();
      try {
        await fn();
        record(op, performance.now() - t0);
      } catch (err) {
        const name = err instanceof DBusError ? err.type : `local:${(err as Error).message}`;
        const key = `${op}: ${name}${expected.includes(name) ? ' (expected)' : ''}`;
        result.errors[key] = (result.errors[key] ?? 0) + 1;
      }
      result.calls++;
    };
    await timed('CreateMachine', () => call(bus, '/org/vmkeeper1', 'org.vmkeeper1.Manager', 'CreateMachine', 'ss', [own, SPEC]), ['org.vmkeeper1.Error.MachineExists']);
    while (Date.now() < deadline) {
      const r = Math.random();
      if (r < 0.3) await timed('GetMachine', () => call(bus, '/org/vmkeeper1', 'org.vmkeeper1.Manager', 'GetMachine', 's', [own]));
      else if (r < 0.45) await timed('PropertyGet', () => call(bus, machineObjectPath(own), 'org.freedesktop.DBus.Properties', 'Get', 'ss', ['org.vmkeeper1.Machine', 'State']));
      else if (r < 0.6) await timed('DescribeMachine', () => call(bus, '/org/vmkeeper1', 'org.vmkeeper1.Manager', 'DescribeMachine', 's', [own]));
      else if (r < 0.7) await timed('ListMachines', () => call(bus, '/org/vmkeeper1', 'org.vmkeeper1.Manager', 'ListMachines'));
      else if (r < 0.75) await timed('ListEvents', () => call(bus, '/org/vmkeeper1', 'org.vmkeeper1.Manager', 'ListEvents'));
      else if (r < 0.92) await timed('SetMachineAnnotations', () => call(bus, '/org/vmkeeper1', 'org.vmkeeper1.Manager', 'SetMachineAnnotations', 'sa{ss}', [own, { n: String(serial++) }]));
      else {
        // A short-lived machine: create, then delete at once (force).
        const tmp = `w${worker}-t${serial++}`;
        await timed('CreateMachine', () => call(bus, '/org/vmkeeper1', 'org.vmkeeper1.Manager', 'CreateMachine', 'ss', [tmp, SPEC]));
        await timed('DeleteMachineWithGracePeriod', () => call(bus, '/org/vmkeeper1', 'org.vmkeeper1.Manager', 'DeleteMachineWithGracePeriod', 'su', [tmp, 0]));
      }
    }
  };
  await Promise.all(buses.map((b, i) => clientLoop(b, i)));
  for (const b of buses) b.disconnect();
  process.stdout.write(`${JSON.stringify(result)}\n`);
}

await main();
process.exit(0);
