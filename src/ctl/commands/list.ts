import { type Command, type Context, writeJson } from '../command.js';
import { stateStyle } from '../format/style.js';
import { formatTable } from '../format/table.js';
import { formatAge, formatCountdown } from '../format/time.js';
import type { MachineInfo } from '../model.js';

const iso = (ms: number) => (ms > 0 ? new Date(ms).toISOString() : null);

export function machineSummaryJson(m: MachineInfo) {
  return {
    name: m.name,
    state: m.state,
    power: m.power,
    createdAt: iso(m.createdAt),
    deletionTimestamp: iso(m.deletionTimestamp),
    forceStopAt: iso(m.forceStopAt),
    gracePeriodSec: m.gracePeriodSec,
    annotations: m.annotations,
    path: m.path,
  };
}

/** The DEADLINE column: a countdown only while a shutdown (stop or delete) has a deadline. */
export function deadlineText(m: MachineInfo, now: number): string {
  return m.forceStopAt > 0 ? formatCountdown(m.forceStopAt, now) : '-';
}

export function renderMachineTable(ctx: Context, machines: MachineInfo[]): string {
  const now = ctx.clock.now();
  const st = ctx.io.styles;
  return formatTable(
    ['NAME', 'STATE', 'POWER', 'AGE', 'DEADLINE'],
    machines.map((m) => [m.name, { text: m.state, style: stateStyle(st, m.state) }, m.power, formatAge(m.createdAt, now), deadlineText(m, now)]),
    { maxWidth: ctx.io.columns },
  );
}

export const listCommand: Command = {
  name: 'list',
  summary: 'list machines with state, power, age and force-stop deadline',
  usage: '',
  description:
    'Lists every machine, sorted by name. DEADLINE counts down to the force stop of a machine that is\n' +
    'being stopped or deleted. With --json, prints an array of objects.',
  options: [],
  args: { min: 0, max: 0 },
  async run(ctx) {
    const machines = await (await ctx.client()).listMachines();
    if (ctx.json) {
      writeJson(ctx, machines.map(machineSummaryJson));
    } else if (machines.length === 0) {
      ctx.io.err('No machines.\n');
    } else {
      ctx.io.out(renderMachineTable(ctx, machines));
    }
    return 0;
  },
};
