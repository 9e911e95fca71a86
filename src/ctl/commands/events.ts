import { flag } from '../args.js';
import { type Command, type Context, writeJson } from '../command.js';
import { CtlError, ExitCode } from '../errors.js';
import { eventTypeStyle } from '../format/style.js';
import { formatTable, truncate } from '../format/table.js';
import { formatTimestamp } from '../format/time.js';
import { holdSignals } from '../held-signals.js';
import type { AgentEvent, AgentSignal } from '../model.js';

export function eventJson(e: AgentEvent) {
  return { timestamp: new Date(e.timestamp).toISOString(), machine: e.machine, type: e.type, reason: e.reason, message: e.message };
}

const eventKey = (e: AgentEvent) => `${e.timestamp}\u0000${e.machine}\u0000${e.reason}\u0000${e.message}`;

/** One followed event as a line with the same columns as the table. */
export function eventLine(ctx: Pick<Context, 'io'>, e: AgentEvent): string {
  const line = `${formatTimestamp(e.timestamp)}   ${e.type.padEnd(7)}   ${e.machine}   ${e.reason}   ${e.message}`;
  const fitted = ctx.io.columns !== undefined ? truncate(line, ctx.io.columns) : line;
  return e.type === 'warning' ? ctx.io.styles.yellow(fitted) : fitted;
}

export const eventsCommand: Command = {
  name: 'events',
  summary: 'show recent events, and follow new ones with --follow',
  usage: '[--follow] [NAME]',
  description:
    "Prints the agent's recent events (oldest first), only NAME's when given. --follow keeps\n" +
    'printing new events as they happen until interrupted. With --json, prints an array, or one\n' +
    'JSON object per line when following.',
  options: [{ name: 'follow', short: 'f', help: 'keep printing new events as they happen' }],
  args: { min: 0, max: 1 },
  async run(ctx, args) {
    const name = args.positionals[0];
    const follow = flag(args, 'follow');
    const client = await ctx.client();
    const wanted = (e: AgentEvent) => name === undefined || e.machine === name;

    if (!follow) {
      const events = (await client.listEvents()).filter(wanted);
      if (ctx.json) writeJson(ctx, events.map(eventJson));
      else if (events.length === 0) ctx.io.err('No events.\n');
      else
        ctx.io.out(
          formatTable(
            ['TIME', 'TYPE', 'MACHINE', 'REASON', 'MESSAGE'],
            events.map((e) => [formatTimestamp(e.timestamp), { text: e.type, style: eventTypeStyle(ctx.io.styles, e.type) }, e.machine, e.reason, e.message]),
            { maxWidth: ctx.io.columns },
          ),
        );
      return 0;
    }

    const print = (e: AgentEvent) => ctx.io.out(ctx.json ? `${JSON.stringify(eventJson(e))}\n` : `${eventLine(ctx, e)}\n`);
    // Subscribe first, then list: an event in between is in both, and printed once.
    const signals = await holdSignals(client);
    try {
      const seen = new Set<string>();
      for (const e of (await client.listEvents()).filter(wanted)) {
        seen.add(eventKey(e));
        print(e);
      }
      return await new Promise<number>((resolve, reject) => {
        let done = false;
        const finish = (err?: CtlError) => {
          if (done) return;
          done = true;
          ctx.signal.removeEventListener('abort', onAbort);
          if (err) reject(err);
          else resolve(0);
        };
        const onAbort = () => finish();
        const handle = (s: AgentSignal) => {
          if (done) return;
          if (s.kind === 'event' && wanted(s.event) && !seen.has(eventKey(s.event))) print(s.event);
          else if (s.kind === 'agent-gone') finish(new CtlError('vmkeeperd went away (agent disconnected)', ExitCode.AgentNotRunning));
          else if (s.kind === 'disconnected') finish(new CtlError(`lost the D-Bus connection: ${s.reason}`, ExitCode.AgentNotRunning));
        };
        if (ctx.signal.aborted) return finish();
        ctx.signal.addEventListener('abort', onAbort, { once: true });
        signals.release(handle);
      });
    } finally {
      signals.close();
    }
  },
};
