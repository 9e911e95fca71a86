import { type Command, type Context, writeJson } from '../command.js';
import { formatTable } from '../format/table.js';
import { formatDuration, formatTimestamp } from '../format/time.js';
import type { ShutdownRecordView, VmkeeperClient } from '../model.js';

// shutdowns [ID]: the persisted records of host shutdowns, service stops and drains.

/** The columns of the counts, in the order a stop run gets worse. */
const RESULTS = ['clean', 'saved', 'forced', 'failed', 'left-running'] as const;

export function countResults(record: ShutdownRecordView): Record<string, number> {
  const counts: Record<string, number> = Object.fromEntries(RESULTS.map((r) => [r, 0]));
  for (const m of record.machines ?? []) counts[m.result ?? '?'] = (counts[m.result ?? '?'] ?? 0) + 1;
  return counts;
}

async function describe(client: VmkeeperClient, id: string): Promise<ShutdownRecordView> {
  return JSON.parse(await client.describeShutdownRecord(id)) as ShutdownRecordView;
}

function renderList(ctx: Context, records: ShutdownRecordView[]): string {
  return formatTable(
    ['ID', 'KIND', 'RESULT', 'STARTED', 'ENDED', ...RESULTS.map((r) => r.toUpperCase())],
    records.map((r) => {
      const counts = countResults(r);
      return [r.id, r.kind, r.result, formatTimestamp(r.startedAt), formatTimestamp(r.finishedAt), ...RESULTS.map((k) => String(counts[k]))];
    }),
    { maxWidth: ctx.io.columns },
  );
}

export function renderRecord(ctx: Pick<Context, 'io'>, r: ShutdownRecordView): string {
  const took = r.finishedAt > 0 && r.startedAt > 0 ? ` (${formatDuration(r.finishedAt - r.startedAt)})` : '';
  const counts = countResults(r);
  const lines = [
    `Record: ${r.id}`,
    `Kind: ${r.kind}`,
    `Result: ${r.result}`,
    `Started: ${formatTimestamp(r.startedAt)}`,
    `Ended: ${formatTimestamp(r.finishedAt)}${took}`,
    ...(r.boundSec !== undefined ? [`Bound: ${r.boundSec}s`] : []),
    `Machines: ${Object.entries(counts).filter(([, n]) => n > 0).map(([k, n]) => `${n} ${k}`).join(', ') || 'none'}`,
  ];
  let out = `${lines.join('\n')}\n`;
  const groups = r.groups ?? [];
  if (groups.length > 0) {
    out += `\nGroups (stopped in this order):\n${formatTable(
      ['GROUP', 'MIN-PRIORITY', 'BUDGET', 'STARTED', 'TOOK'],
      groups.map((g, i) => [String(i), String(g.minPriority ?? 0), `${g.budgetSec ?? 0}s`, formatTimestamp(g.startedAt ?? 0), (g.startedAt ?? 0) > 0 && (g.finishedAt ?? 0) > 0 ? formatDuration(g.finishedAt! - g.startedAt!) : '-']),
      { maxWidth: ctx.io.columns },
    )}`;
  }
  const machines = r.machines ?? [];
  if (machines.length > 0) {
    const st = ctx.io.styles;
    out += `\nMachines:\n${formatTable(
      ['MACHINE', 'ACTION', 'PRIORITY', 'GROUP', 'RESULT', 'AFTER', 'DETAIL'],
      machines.map((m) => [
        m.machine ?? m.domain ?? '?',
        m.action ?? '?',
        String(m.priority ?? 0),
        String(m.group ?? 0),
        { text: m.result ?? '?', style: m.result === 'failed' || m.result === 'left-running' ? st.red : m.result === 'forced' ? st.yellow : undefined },
        m.result === 'pending' ? '-' : formatDuration(m.afterMs ?? 0),
        m.detail ?? '',
      ]),
      { maxWidth: ctx.io.columns },
    )}`;
  }
  return out;
}

export const shutdownsCommand: Command = {
  name: 'shutdowns',
  summary: 'list the records of host shutdowns and drains, or show one',
  usage: '[ID]',
  description:
    'Without ID, lists every kept record (oldest first): its kind (host-shutdown, service-stop,\n' +
    'drain), result (completed, cancelled, interrupted, in-progress), times, and how many machines\n' +
    'ended clean, saved, forced, failed or left running. With ID, shows that record: its priority\n' +
    'groups and what became of each machine. --json prints the records as the agent keeps them.',
  options: [],
  args: { min: 0, max: 1 },
  async run(ctx, args) {
    const client = await ctx.client();
    const id = args.positionals[0];
    if (id !== undefined) {
      const record = await describe(client, id);
      if (ctx.json) writeJson(ctx, record);
      else ctx.io.out(renderRecord(ctx, record));
      return 0;
    }
    const summaries = await client.listShutdownRecords();
    // The counts are in each record; a record removed meanwhile is shown without them.
    const records = await Promise.all(summaries.map((s) => describe(client, s.id).catch(() => ({ ...s, machines: [] }))));
    if (ctx.json) writeJson(ctx, records.map((r) => ({ id: r.id, kind: r.kind, result: r.result, startedAt: r.startedAt, finishedAt: r.finishedAt, counts: countResults(r) })));
    else if (records.length === 0) ctx.io.err('No shutdown records.\n');
    else ctx.io.out(renderList(ctx, records));
    return 0;
  },
};
