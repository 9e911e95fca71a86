import { type Command, type Context, writeJson } from '../command.js';
import { CtlError, ExitCode } from '../errors.js';
import { eventTypeStyle, stateStyle } from '../format/style.js';
import { formatTable } from '../format/table.js';
import { formatAge, formatCountdown, formatDuration, formatTimestamp } from '../format/time.js';
import type { AgentEvent } from '../model.js';

// The Describe record, laid out like `machinectl status`: one "Label: value" line per fact.

interface Described {
  metadata?: {
    name?: string;
    uuid?: string;
    domainName?: string;
    createdAt?: string | null;
    deletionTimestamp?: string | null;
    deletionGracePeriodSec?: number | null;
    resourceVersion?: number;
    annotations?: Record<string, string>;
  };
  spec?: {
    cpus?: number;
    memoryMiB?: number;
    domainType?: string;
    boot?: { kernel?: string; initrd?: string; cmdline?: string };
    disks?: Array<{ name?: string; image?: string; sizeGiB?: number }>;
    nics?: Array<{ name?: string; network?: string; bridge?: string }>;
    power?: string;
    gracePeriodSec?: number;
  };
  status?: {
    state?: string;
    power?: string;
    shutdownRequestedAt?: string | null;
    forceStopAt?: string | null;
    gracePeriodSec?: number;
    message?: string;
  };
}

const RECENT_EVENTS = 10;

const ms = (t: string | null | undefined) => (t ? Date.parse(t) : 0);

export function renderStatus(record: Described, events: AgentEvent[], ctx: Pick<Context, 'clock' | 'io'>): string {
  const now = ctx.clock.now();
  const st = ctx.io.styles;
  const m = record.metadata ?? {};
  const s = record.status ?? {};
  const spec = record.spec ?? {};
  const lines: Array<[string, string]> = [];
  const add = (label: string, value: string | undefined) => {
    if (value !== undefined && value !== '') lines.push([label, value]);
  };
  const state = s.state ?? '?';
  add('Name', m.name);
  add('State', stateStyle(st, state)(state) + (s.message ? ` (${s.message})` : ''));
  add('Power', s.power ?? spec.power);
  add('UUID', m.uuid);
  add('Domain', m.domainName);
  const created = ms(m.createdAt);
  if (created) add('Created', `${formatTimestamp(created)} (${formatAge(created, now)} ago)`);
  const deleting = ms(m.deletionTimestamp);
  if (deleting) add('Deleting', `since ${formatTimestamp(deleting)}, grace ${m.deletionGracePeriodSec ?? '?'}s`);
  const requested = ms(s.shutdownRequestedAt);
  if (requested) add('Shutdown', `requested ${formatTimestamp(requested)} (${formatAge(requested, now)} ago)`);
  const force = ms(s.forceStopAt);
  if (force) add('Force stop', `${formatTimestamp(force)} (${formatCountdown(force, now)})`);
  if (s.gracePeriodSec) add('Grace', formatDuration(s.gracePeriodSec * 1000));
  else if (spec.gracePeriodSec !== undefined) add('Grace', formatDuration(spec.gracePeriodSec * 1000));
  add('CPUs', spec.cpus?.toString());
  add('Memory', spec.memoryMiB !== undefined ? `${spec.memoryMiB} MiB` : undefined);
  add('Type', spec.domainType);
  if (spec.boot) {
    add('Kernel', spec.boot.kernel);
    add('Initrd', spec.boot.initrd);
    add('Cmdline', spec.boot.cmdline);
  }
  (spec.disks ?? []).forEach((d, i) => {
    const what = d.image ? `${d.image} (copy-on-write${d.sizeGiB ? `, ${d.sizeGiB} GiB` : ''})` : `empty, ${d.sizeGiB ?? '?'} GiB`;
    add(i === 0 ? 'Disks' : '', `${d.name}: ${what}`);
  });
  (spec.nics ?? []).forEach((n, i) => {
    add(i === 0 ? 'NICs' : '', `${n.name}: ${n.network !== undefined ? `network ${n.network}` : `bridge ${n.bridge}`}`);
  });
  Object.entries(m.annotations ?? {}).forEach(([k, v], i) => add(i === 0 ? 'Annotations' : '', `${k}=${v}`));
  add('Version', m.resourceVersion?.toString());

  const width = Math.max(...lines.map(([l]) => l.length)) + 1;
  let out = lines.map(([label, value]) => `${(label ? `${label}:` : '').padStart(width)} ${value}`).join('\n') + '\n';
  const recent = events.filter((e) => e.machine === m.name).slice(-RECENT_EVENTS);
  if (recent.length > 0) {
    out += '\nRecent events:\n';
    out += formatTable(
      ['TIME', 'TYPE', 'REASON', 'MESSAGE'],
      recent.map((e) => [formatTimestamp(e.timestamp), { text: e.type, style: eventTypeStyle(st, e.type) }, e.reason, e.message]),
      { maxWidth: ctx.io.columns },
    );
  }
  return out;
}

export const statusCommand: Command = {
  name: 'status',
  summary: 'show everything the agent knows about a machine',
  usage: 'NAME',
  description:
    "Shows the machine's record (metadata, spec and status) and its recent events.\n" +
    'With --json, prints the record exactly as DescribeMachine returns it.',
  options: [],
  args: { min: 1, max: 1 },
  async run(ctx, args) {
    const name = args.positionals[0]!;
    const client = await ctx.client();
    const text = await client.describeMachine(name);
    let record: Described;
    try {
      record = JSON.parse(text) as Described;
    } catch {
      throw new CtlError('vmkeeperd returned a record that is not JSON', ExitCode.Failure);
    }
    if (ctx.json) {
      writeJson(ctx, record);
      return 0;
    }
    const events = await client.listEvents().catch(() => []);
    ctx.io.out(renderStatus(record, events, ctx));
    return 0;
  },
};
