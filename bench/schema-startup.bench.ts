// What the schema library costs: valibot's import plus building our spec schema, each in a fresh
// process (the start-up the agent pays once), and 10,000 spec parses with the valibot validator
// and with the hand-written one it replaced (bench/hand-written-spec.ts), on the same spec.
// Run: npx tsx bench/schema-startup.bench.ts [runs=5]
import { spawnSync } from 'node:child_process';
import { isDeepStrictEqual } from 'node:util';
import { fileURLToPath } from 'node:url';
import { DEFAULT_SPEC_LIMITS, parseMachineSpec } from '../src/machine/spec.js';
import { parseMachineSpecHandWritten } from './hand-written-spec.js';

const PARSES = 10_000;
const IMG = DEFAULT_SPEC_LIMITS.imageDirectories[0];
/** A spec with every section in use, as a caller sends it. */
const SPEC = JSON.stringify({
  cpus: 2, memoryMiB: 1024, domainType: 'qemu',
  boot: { kernel: `${IMG}/vmlinuz`, initrd: `${IMG}/initrd.img`, cmdline: 'console=ttyS0 quiet' },
  disks: [{ name: 'root', image: `${IMG}/base.qcow2`, sizeGiB: 10 }, { name: 'data', sizeGiB: 20 }],
  nics: [{ name: 'eth0', network: 'default' }, { name: 'eth1', bridge: 'br0' }],
  power: 'on', gracePeriodSec: 60, restartPolicy: 'always', annotations: { owner: 'bench', 'example.com/team': 'storage' },
});

interface ColdStart {
  importMs: number;
  buildMs: number;
  ownModulesMs: number;
}

function coldStartInChild(): ColdStart {
  const child = fileURLToPath(new URL('./schema-cold-start.ts', import.meta.url));
  const r = spawnSync(process.execPath, ['--import', 'tsx', child], { encoding: 'utf8', timeout: 60_000 });
  if (r.status !== 0) throw new Error(`cold start child failed: ${r.stderr}`);
  return JSON.parse(r.stdout) as ColdStart;
}

function timeParses(parse: (text: string) => unknown): number {
  for (let i = 0; i < 1_000; i++) parse(SPEC); // warm-up: the agent parses many specs once started
  const start = performance.now();
  for (let i = 0; i < PARSES; i++) parse(SPEC);
  return performance.now() - start;
}

const range = (values: number[]) => `${Math.min(...values).toFixed(1)}-${Math.max(...values).toFixed(1)} ms`;

export function schemaStartupBench(runs: number): string[] {
  const valibotParse = (text: string) => parseMachineSpec(text, DEFAULT_SPEC_LIMITS);
  const handWrittenParse = (text: string) => parseMachineSpecHandWritten(text, DEFAULT_SPEC_LIMITS);
  if (!isDeepStrictEqual({ ...valibotParse(SPEC) }, { ...handWrittenParse(SPEC) })) throw new Error('the two validators disagree on the spec');
  const cold = Array.from({ length: runs }, coldStartInChild);
  const valibot: number[] = [];
  const handWritten: number[] = [];
  for (let run = 0; run < runs; run++) {
    valibot.push(timeParses(valibotParse));
    handWritten.push(timeParses(handWrittenParse));
  }
  return [
    `valibot import + spec schema build, fresh process (${runs} runs): ${range(cold.map((c) => c.importMs + c.buildMs))}` +
      ` (import ${range(cold.map((c) => c.importMs))}, build ${range(cold.map((c) => c.buildMs))}; our schema modules loaded in ${range(cold.map((c) => c.ownModulesMs))}, not counted)`,
    `${PARSES} spec parses, valibot validator (${runs} runs): ${range(valibot)}`,
    `${PARSES} spec parses, hand-written validator (${runs} runs): ${range(handWritten)}`,
  ];
}

if (import.meta.url === `file://${process.argv[1]}`) {
  for (const line of schemaStartupBench(Number(process.argv[2] ?? 5))) console.log(line);
  process.exit(0);
}
