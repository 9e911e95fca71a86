// Cost of one event log line per journal transport, in this process:
//   - native: encode the fields and send one datagram (unix-dgram) to a unix datagram socket that
//     a separate receiver process drains, as journald would
//   - stream: the same entry as a `<6>...` line through winston to a file stream (/dev/null)
//   - a process per entry (what `logger --journald` would need): spawn and reap `true`, a lower bound
// Run: npx tsx bench/journal-transport.bench.ts   (VMKEEPER_BENCH_QUICK=1 for fewer entries)
import { spawn, spawnSync } from 'node:child_process';
import { createWriteStream, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { encodeJournalEntry } from '../src/logging/journal/entry-encoding.js';
import { journalEntryFields } from '../src/logging/journal/entry-fields.js';
import { openJournalSocket, type DatagramSender } from '../src/logging/journal/journal-socket.js';
import { createLogger } from '../src/logging/winston-logger.js';
import { waitFor } from '../test/support/wait.js';

const quick = process.env.VMKEEPER_BENCH_QUICK === '1';
const ENTRIES = quick ? 5_000 : 50_000;
const SPAWNS = quick ? 50 : 300;
const BATCH = 100;

const eventFields = (i: number) => ({ machine: `web-${i % 100}`, reason: 'PowerChanged', sequence: i + 1, uid: 1000, call: 'SetMachinePower' });
const message = (i: number) => `web-${i % 100}: power set to off`;

/** A receiver in its own process, counting datagrams, so sending here is not slowed by reading. */
async function startReceiver(socketPath: string) {
  const code = `
    const u = require('unix-dgram');
    let n = 0;
    const s = u.createSocket('unix_dgram', () => n++);
    s.bind(process.argv[1]);
    process.stdout.write('ready\\n');
    setInterval(() => process.stdout.write(n + '\\n'), 2);
  `;
  const child = spawn(process.execPath, ['-e', code, socketPath], { stdio: ['ignore', 'pipe', 'inherit'], cwd: process.cwd() });
  let last = '';
  child.stdout.on('data', (d: Buffer) => (last = d.toString().trim().split('\n').pop() ?? last));
  await waitFor(() => last !== '', { timeoutMs: 10_000, what: 'the receiver' });
  return { received: () => Number(last) || 0, stop: () => child.kill() };
}

/** paced: each burst of 100 waits until the receiver has them all (journald keeping up); else a flood. */
async function native(paced: boolean): Promise<string[]> {
  const dir = mkdtempSync(path.join(tmpdir(), 'journal-bench-'));
  const socketPath = path.join(dir, 'socket');
  const receiver = await startReceiver(socketPath);
  const sender = openJournalSocket(socketPath) as DatagramSender | string;
  if (typeof sender === 'string') throw new Error(sender);
  let refused = 0;
  let sent = 0;
  let bytes = 0;
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  let callMs = 0;
  for (let i = 0; i < ENTRIES; i += BATCH) {
    const b0 = performance.now();
    for (let j = i; j < i + BATCH; j++) {
      const d = encodeJournalEntry(journalEntryFields('info', message(j), eventFields(j)));
      bytes += d.length;
      sent++;
      sender.send(d, () => refused++);
    }
    callMs += performance.now() - b0;
    // Events come in bursts, not in one tight loop: let the receiver drain between bursts.
    if (paced) await waitFor(() => receiver.received() >= sent - refused, { timeoutMs: 30_000, intervalMs: 1, what: 'the burst received' });
    else await new Promise((r) => setImmediate(r));
  }
  const sendUs = (callMs * 1000) / ENTRIES;
  // Until the last one is delivered: entries held while the receiver's queue was full count too.
  await waitFor(() => receiver.received() >= ENTRIES - refused, { timeoutMs: 60_000, intervalMs: 5, what: 'every datagram received' });
  const wallUs = ((performance.now() - t0) * 1000) / ENTRIES;
  const cpu = process.cpuUsage(cpu0);
  sender.close();
  receiver.stop();
  rmSync(dir, { recursive: true, force: true });
  const encodeOnly0 = performance.now();
  for (let j = 0; j < ENTRIES; j++) encodeJournalEntry(journalEntryFields('info', message(j), eventFields(j)));
  const encodeUs = ((performance.now() - encodeOnly0) * 1000) / ENTRIES;
  return [
    `native datagram, ${paced ? 'bursts of 100, receiver keeping up' : 'one flood'}: ${sent} entries, ${(bytes / ENTRIES).toFixed(0)} bytes each: ${sendUs.toFixed(2)} us/entry in the logging call, ${wallUs.toFixed(2)} us/entry until delivered, ${((cpu.user + cpu.system) / ENTRIES).toFixed(2)} us/entry CPU (this process, waits included); refused (written as stream lines) ${refused}`,
    `  of which encoding the fields: ${encodeUs.toFixed(2)} us/entry`,
  ];
}

async function stream(): Promise<string> {
  const out = createWriteStream('/dev/null');
  const logger = createLogger({ level: 'info', format: 'journal', stream: out });
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  let callMs = 0;
  for (let i = 0; i < ENTRIES; i += BATCH) {
    const b0 = performance.now();
    for (let j = i; j < i + BATCH; j++) logger.info(message(j), eventFields(j));
    callMs += performance.now() - b0;
    await new Promise((r) => setImmediate(r));
  }
  await logger.close();
  const wallUs = ((performance.now() - t0) * 1000) / ENTRIES;
  const cpu = process.cpuUsage(cpu0);
  return `stream line (winston, /dev/null): ${((callMs * 1000) / ENTRIES).toFixed(2)} us/entry in the logging call, ${wallUs.toFixed(2)} us/entry until written, ${((cpu.user + cpu.system) / ENTRIES).toFixed(2)} us/entry CPU`;
}

function processPerEntry(): string {
  const t0 = performance.now();
  for (let i = 0; i < SPAWNS; i++) spawnSync('true');
  return `a process per entry (spawn + reap of true, lower bound for logger --journald): ${((performance.now() - t0) / SPAWNS).toFixed(2)} ms/entry wall`;
}

for (const line of await native(true)) console.log(line);
for (const line of await native(false)) console.log(line);
console.log(await stream());
console.log(processPerEntry());
