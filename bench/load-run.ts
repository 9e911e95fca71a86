// Drives bench/load-worker.ts processes against a running agent and samples the agent's memory.
// Shared by bench/load.bench.ts and test/integration/reliability/load.test.ts.
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { percentile } from './common.js';
import type { WorkerResult } from './load-worker.js';

const WORKER = path.join(path.dirname(fileURLToPath(import.meta.url)), 'load-worker.ts');

export interface LoadOptions {
  address: string;
  agentPid: number;
  clients: number;
  workers: number;
  durationMs: number;
}

export interface LoadSummary {
  calls: number;
  callsPerSec: number;
  p50: number;
  p99: number;
  max: number;
  byOp: Record<string, { n: number; p50: number; p99: number }>;
  errors: Record<string, number>;
  /** [seconds since start, VmRSS KiB] every second. */
  rss: Array<[number, number]>;
}

/** CPU time (user + system) of a process, or of one of its threads, in seconds. */
export function cpuSeconds(pid: number, thread?: number): number {
  const stat = readFileSync(thread === undefined ? `/proc/${pid}/stat` : `/proc/${pid}/task/${thread}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(f[11]) + Number(f[12])) / 100; // utime + stime, USER_HZ = 100
}

export function rssKiB(pid: number): number {
  const m = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) : NaN;
}

export async function runLoad(o: LoadOptions): Promise<LoadSummary> {
  const per = Math.ceil(o.clients / o.workers);
  const started = Date.now();
  const rss: Array<[number, number]> = [[0, rssKiB(o.agentPid)]];
  const sampler = setInterval(() => rss.push([(Date.now() - started) / 1000, rssKiB(o.agentPid)]), 1000);
  const results = await Promise.all(
    Array.from({ length: o.workers }, (_, w) =>
      new Promise<WorkerResult>((resolve, reject) => {
        const n = Math.min(per, o.clients - w * per);
        const child = spawn(process.execPath, ['--import', 'tsx', WORKER, o.address, String(n), String(o.durationMs), String(w)], { stdio: ['ignore', 'pipe', 'pipe'] });
        let out = '';
        let err = '';
        child.stdout.on('data', (c: Buffer) => (out += c.toString()));
        child.stderr.on('data', (c: Buffer) => (err += c.toString()));
        child.once('exit', (code) => {
          const line = out.trim().split('\n').at(-1);
          if (code !== 0 || !line) reject(new Error(`load worker ${w} exited ${code}: ${err.slice(-2000)}`));
          else resolve(JSON.parse(line) as WorkerResult);
        });
      }),
    ),
  );
  clearInterval(sampler);
  rss.push([(Date.now() - started) / 1000, rssKiB(o.agentPid)]);
  const all: number[] = [];
  const byOpValues: Record<string, number[]> = {};
  const errors: Record<string, number> = {};
  let calls = 0;
  for (const r of results) {
    calls += r.calls;
    for (const [op, v] of Object.entries(r.latencies)) {
      (byOpValues[op] ??= []).push(...v);
      all.push(...v);
    }
    for (const [k, v] of Object.entries(r.errors)) errors[k] = (errors[k] ?? 0) + v;
  }
  const byOp = Object.fromEntries(Object.entries(byOpValues).map(([op, v]) => [op, { n: v.length, p50: percentile(v, 50), p99: percentile(v, 99) }]));
  return {
    calls,
    callsPerSec: calls / (o.durationMs / 1000),
    p50: percentile(all, 50),
    p99: percentile(all, 99),
    max: all.reduce((a, b) => Math.max(a, b), 0),
    byOp,
    errors,
    rss,
  };
}

/** RSS growth after warm-up: the largest sample of the last third against the median of the second quarter. */
export function rssGrowth(rss: Array<[number, number]>, durationSec: number): { warm: number; late: number } {
  const warmSamples = rss.filter(([t]) => t >= durationSec * 0.25 && t <= durationSec * 0.5).map(([, v]) => v);
  const late = rss.filter(([t]) => t >= (durationSec * 2) / 3).map(([, v]) => v);
  return { warm: percentile(warmSamples, 50), late: Math.max(...late) };
}
