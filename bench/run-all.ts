// Every benchmark, one after the other, numbers printed (docs/performance.md records them).
// Run: npx tsx bench/run-all.ts          (VMKEEPER_BENCH_QUICK=1 for a short smoke run)
import { execFileSync, spawnSync } from 'node:child_process';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { authorizationBench } from './authorization.bench.js';
import { dbusLatencyBench } from './dbus-latency.bench.js';
import { idleBench } from './idle.bench.js';
import { loadBench } from './load.bench.js';
import { scaleBench } from './scale.bench.js';
import { startupBench } from './startup.bench.js';

const quick = process.env.VMKEEPER_BENCH_QUICK === '1';
const here = path.dirname(fileURLToPath(import.meta.url));

function section(title: string, lines: string[]): void {
  console.log(`\n== ${title} ==`);
  for (const l of lines) console.log(l);
}

function runScript(file: string, args: string[] = []): string[] {
  const r = spawnSync(process.execPath, ['--import', 'tsx', path.join(here, file), ...args], { encoding: 'utf8', timeout: 900_000 });
  return `${r.stdout}${r.status === 0 ? '' : `\n(exit ${r.status}) ${r.stderr.slice(-2000)}`}`.trim().split('\n');
}

const mem = (os.totalmem() / 2 ** 30).toFixed(1);
const load = os.loadavg().map((l) => l.toFixed(2)).join(' ');
section('machine', [
  `${os.cpus().length} CPUs (${os.cpus()[0]?.model ?? '?'}), ${mem} GiB RAM, Node ${process.version}, ${os.type()} ${os.release()}`,
  `load average at start: ${load}`,
  `dbus-daemon ${execFileSync('dbus-daemon', ['--version'], { encoding: 'utf8' }).split('\n')[0]}`,
]);
section('D-Bus call latency (ratio to org.freedesktop.DBus.GetId)', await dbusLatencyBench());
section('start-up to READY', await startupBench(10_000, quick ? 1 : 3));
section('idle RSS and CPU', await idleBench(quick ? 10 : 30));
section('force-stop lateness and sweeper (bench/sweeper.bench.ts)', runScript('sweeper.bench.ts'));
section('record store load (bench/store-load.bench.ts)', runScript('store-load.bench.ts'));
section('schema library (bench/schema-startup.bench.ts)', runScript('schema-startup.bench.ts'));
section('issue 12 at scale: 10,000 machines (bench/scale.bench.ts)', await scaleBench(10_000));
section('the test driver in the RSS figures (bench/test-driver-rss.bench.ts)', runScript('test-driver-rss.bench.ts', ['10000']));
section('load: 200 clients', await loadBench(quick ? 15 : Number(process.env.VMKEEPER_LOAD_SECONDS ?? 60)));
section('authorization: polkit versus the bus policy (bench/authorization.bench.ts)', await authorizationBench());
console.log(`\nload average at end: ${os.loadavg().map((l) => l.toFixed(2)).join(' ')}`);
process.exit(0);
