// Host shutdown of N real guests (half obey ACPI, half ignore it) with timeout T, under real
// systemd in an nspawn container (Debian 12, libvirt 9.0, TCG qemu), two ways:
//   A. vmkeeperd (hostShutdown.timeoutSec=T, libvirt-guests masked)
//   B. libvirt-guests (ON_SHUTDOWN=shutdown, PARALLEL_SHUTDOWN=N, SHUTDOWN_TIMEOUT=T, vmkeeperd stopped)
// and prints: guests off cleanly, destroyed / left running, time until all guests were off,
// and the whole `systemctl poweroff` time. Root only; needs `npm run build` first.
// Run: npx tsx bench/host-shutdown.bench.ts [N=4] [T=20] [both|vmkeeperd|libvirt-guests]
// Each run's full journal is saved to .cache/bench/host-shutdown-<tool>.journal.
import { promises as fs } from 'node:fs';
import path from 'node:path';
import { REPO_ROOT } from '../test/support/guest-images.js';
import { bootAgentContainer, type AgentContainer } from '../test/integration/systemd/container.js';

const N = Number(process.argv[2] ?? 4);
const T = Number(process.argv[3] ?? 20);
const WHICH = process.argv[4] ?? 'both';
const JOURNAL_DIR = path.join(REPO_ROOT, '.cache', 'bench');

async function saveJournal(a: AgentContainer, how: string): Promise<string> {
  const j = await a.c.journal();
  await fs.mkdir(JOURNAL_DIR, { recursive: true });
  await fs.writeFile(path.join(JOURNAL_DIR, `host-shutdown-${how}.journal`), j);
  await fs.copyFile(path.join(path.dirname(a.c.root), 'nspawn.log'), path.join(JOURNAL_DIR, `host-shutdown-${how}.console`)).catch(() => undefined);
  return j;
}

interface Result {
  how: string;
  clean: number;
  forced: number;
  leftRunning: number;
  /** From the first shutdown request until no guest ran (or the tool gave up), in s. */
  shutdownSec: number;
  /** logind's "will power off" until systemd's "Shutting down." (from the container's journal), in s. */
  poweroffSec: number;
  /** `systemctl poweroff` until the container process was gone (includes final process killing), in s. */
  containerGoneSec: number;
}

const ts = (line: string) => {
  const m = /^(\w{3} \d{2} [\d:.]+)/.exec(line);
  return m ? Date.parse(`${m[1]!.replace(/(\d{2}:\d{2}:\d{2})\.(\d{3})\d*/, '$1.$2')} ${new Date().getFullYear()} UTC`) : NaN;
};

async function bootGuests(name: string, withLibvirtGuests: boolean): Promise<{ a: AgentContainer; guests: string[] }> {
  const a = await bootAgentContainer({ name, hostShutdownTimeoutSec: T, watchdogSec: 30, serviceExtra: [`TimeoutStopSec=${T + 60}s`] });
  if (!withLibvirtGuests) {
    // Before any guest runs: stopping libvirt-guests *is* its shutdown of every running guest.
    await a.c.exec(['systemctl', 'stop', 'libvirt-guests']);
    await a.c.exec(['systemctl', 'mask', 'libvirt-guests']);
  }
  await a.c.exec(['systemctl', 'start', 'vmkeeperd'], { timeoutMs: 60_000 });
  const guests = Array.from({ length: N }, (_, i) => (i % 2 === 0 ? `obey${i}` : `ignore${i}`));
  // Boot two at a time: TCG boots cost ~8 CPU-seconds each on 2 cores.
  for (let i = 0; i < guests.length; i += 2) {
    const batch = guests.slice(i, i + 2);
    for (const g of batch) await a.createGuest(g, g.startsWith('obey') ? 'acpi' : 'ignore');
    await Promise.all(batch.map((g) => a.waitGuestReady(g, g.startsWith('obey') ? 'acpi' : 'ignore', 180_000)));
  }
  return { a, guests };
}

async function timedPoweroff(a: AgentContainer): Promise<number> {
  const t0 = Date.now();
  await a.c.poweroff(T * 1000 + 240_000);
  return (Date.now() - t0) / 1000;
}

function journalPoweroffSec(j: string): number {
  const lines = j.split('\n');
  const start = lines.find((l) => /systemd-logind\[\d+\]: The system will power off now/.test(l)) ?? '';
  const end = lines.find((l) => /systemd\[1\]: Shutting down\./.test(l)) ?? '';
  return (ts(end) - ts(start)) / 1000;
}

async function runVmkeeper(): Promise<Result> {
  const { a, guests } = await bootGuests('vmk-bench-a', false);
  try {
    const containerGoneSec = await timedPoweroff(a);
    const full = await saveJournal(a, 'vmkeeperd');
    const j = full.split('\n').filter((l) => /vmkeeperd\[/.test(l)).join('\n');
    const done = /host shutdown done in ([\d.]+)s: (\d+) shut down cleanly, (\d+) destroyed, (\d+) left running/.exec(j);
    if (!done) throw new Error(`no host shutdown report in the journal:\n${j.slice(-3000)}`);
    if (guests.length !== Number(done[2]) + Number(done[3]) + Number(done[4])) throw new Error('guest count mismatch');
    return { how: 'vmkeeperd', clean: Number(done[2]), forced: Number(done[3]), leftRunning: Number(done[4]), shutdownSec: Number(done[1]), poweroffSec: journalPoweroffSec(full), containerGoneSec };
  } finally {
    await a.stop();
  }
}

async function runLibvirtGuests(): Promise<Result> {
  const { a, guests } = await bootGuests('vmk-bench-b', true);
  try {
    // vmkeeperd steps aside (a plain stop leaves the guests running); libvirt-guests takes over.
    await a.c.exec(['systemctl', 'stop', 'vmkeeperd'], { timeoutMs: 60_000 });
    await a.c.exec(['systemctl', 'mask', 'vmkeeperd']);
    await fs.writeFile(path.join(a.c.root, 'etc/default/libvirt-guests'),
      `ON_BOOT=ignore\nON_SHUTDOWN=shutdown\nPARALLEL_SHUTDOWN=${N}\nSHUTDOWN_TIMEOUT=${T}\n`);
    const running = await a.c.exec(['virsh', '-q', '-c', 'qemu:///system', 'list', '--name']);
    if (running.stdout.trim().split('\n').length !== guests.length) throw new Error(`not all guests running: ${running.stdout}`);
    const containerGoneSec = await timedPoweroff(a);
    const full = await saveJournal(a, 'libvirt-guests');
    const all = full.split('\n');
    const lg = all.filter((l) => /libvirt-guests/.test(l));
    const clean = lg.filter((l) => /Shutdown of guest vmkeeper-\S+ complete/.test(l)).length;
    const startLine = lg.find((l) => /Stopping libvirt-guests/.test(l)) ?? '';
    const endLine = lg.find((l) => /Stopped libvirt-guests|libvirt-guests.service: Deactivated/.test(l)) ?? '';
    return {
      how: 'libvirt-guests',
      clean,
      forced: 0,
      // What libvirt-guests gave up on; systemd then SIGTERMs qemu with the machine scopes.
      leftRunning: guests.length - clean,
      shutdownSec: (ts(endLine) - ts(startLine)) / 1000,
      poweroffSec: journalPoweroffSec(full),
      containerGoneSec,
    };
  } finally {
    await a.stop();
  }
}

const fmt = (r: Result) =>
  `| ${r.how} | ${N} | ${T} | ${r.clean} | ${r.forced} | ${r.leftRunning} | ${r.shutdownSec.toFixed(1)} | ${r.poweroffSec.toFixed(1)} | ${r.containerGoneSec.toFixed(1)} |`;

const results: Result[] = [];
if (WHICH !== 'libvirt-guests') results.push(await runVmkeeper());
if (WHICH !== 'vmkeeperd') results.push(await runLibvirtGuests());
console.log(`host shutdown, N=${N} guests (half ignore ACPI), T=${T}s`);
console.log('| tool | N | T (s) | off cleanly | destroyed at T | left running at its end | until all handled (s) | poweroff, in container (s) | until container gone (s) |');
console.log('|---|---|---|---|---|---|---|---|---|');
for (const r of results) console.log(fmt(r));
