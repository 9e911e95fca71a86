import { flag, stringOption } from '../args.js';
import { EventFollower } from '../event-follower.js';
import { type Command, type Context, writeJson } from '../command.js';
import { CtlError, ExitCode, UsageError } from '../errors.js';
import { eventTypeStyle } from '../format/style.js';
import { formatTable, truncate } from '../format/table.js';
import { formatTimestamp } from '../format/time.js';
import { holdSignals } from '../held-signals.js';
import type { AgentEvent, AgentSignal } from '../model.js';

export function eventJson(e: AgentEvent) {
  return {
    ...(e.sequence !== undefined ? { sequence: e.sequence } : {}),
    timestamp: new Date(e.timestamp).toISOString(), machine: e.machine, type: e.type, reason: e.reason, message: e.message,
    ...(e.uid !== undefined ? { uid: e.uid === '' ? null : Number(e.uid), call: e.call || null } : {}),
  };
}

/** Who caused it: "agent", or "uid 1000 SetMachinePower". */
export function eventActor(e: AgentEvent): string {
  return e.uid ? `uid ${e.uid} ${e.call ?? ''}`.trim() : 'agent';
}

/** The MACHINE column: host-level events (drain, host shutdown) have no machine. */
export function eventSubject(e: AgentEvent): string {
  return e.machine === '' ? '(host)' : e.machine;
}

/** One followed event as a line with the same columns as the table. */
export function eventLine(ctx: Pick<Context, 'io'>, e: AgentEvent): string {
  const line = `${e.sequence ?? '-'}   ${formatTimestamp(e.timestamp)}   ${e.type.padEnd(7)}   ${eventSubject(e)}   ${e.reason}   ${eventActor(e)}   ${e.message}`;
  const fitted = ctx.io.columns !== undefined ? truncate(line, ctx.io.columns) : line;
  return e.type === 'warning' ? ctx.io.styles.yellow(fitted) : fitted;
}

export const eventsCommand: Command = {
  name: 'events',
  summary: 'show recent events, and follow new ones with --follow',
  usage: '[--follow] [--after SEQ] [NAME]',
  description:
    "Prints the agent's journaled events (oldest first) with their sequence and who caused them\n" +
    '("agent", or the caller\'s uid and D-Bus call), only NAME\'s when given. --follow keeps printing\n' +
    'new events until interrupted; across an agent restart it carries on from the last sequence\n' +
    'seen, with no gap and no duplicate. --after SEQ starts after that sequence (to resume).\n' +
    'With --json, prints an array, or one JSON object per line when following.',
  options: [
    { name: 'follow', short: 'f', help: 'keep printing new events as they happen' },
    { name: 'after', value: 'SEQ', help: 'only events after this sequence number' },
  ],
  args: { min: 0, max: 1 },
  async run(ctx, args) {
    const name = args.positionals[0];
    const follow = flag(args, 'follow');
    const afterText = stringOption(args, 'after');
    if (afterText !== undefined && !/^\d+$/.test(afterText)) throw new UsageError(`--after wants a sequence number, not ${JSON.stringify(afterText)}`, 'events');
    const client = await ctx.client();
    const warn = (cursor: number, message: string) => ctx.io.err(`vmkeeperctl: events after ${cursor} are gone (${message}); going on from the oldest kept\n`);

    if (!follow) {
      const events: AgentEvent[] = [];
      const lister = new EventFollower(client, name, { deliver: (e) => events.push(e), expired: warn }, Number(afterText ?? 0));
      await lister.catchUp();
      if (ctx.json) writeJson(ctx, events.map(eventJson));
      else if (events.length === 0) ctx.io.err('No events.\n');
      else
        ctx.io.out(
          formatTable(
            ['SEQ', 'TIME', 'TYPE', 'MACHINE', 'REASON', 'BY', 'MESSAGE'],
            events.map((e) => [String(e.sequence ?? '-'), formatTimestamp(e.timestamp), { text: e.type, style: eventTypeStyle(ctx.io.styles, e.type) }, eventSubject(e), e.reason, eventActor(e), e.message]),
            { maxWidth: ctx.io.columns },
          ),
        );
      return 0;
    }

    const print = (e: AgentEvent) => ctx.io.out(ctx.json ? `${JSON.stringify(eventJson(e))}\n` : `${eventLine(ctx, e)}\n`);
    const follower = new EventFollower(client, name, { deliver: print, expired: warn }, Number(afterText ?? 0));
    // Subscribe first, then list: an event in between is in both, and printed once (by sequence).
    const signals = await holdSignals(client);
    try {
      await follower.catchUp();
      return await new Promise<number>((resolve, reject) => {
        let done = false;
        const finish = (err?: unknown) => {
          if (done) return;
          done = true;
          ctx.signal.removeEventListener('abort', onAbort);
          if (err) reject(err);
          else resolve(0);
        };
        const onAbort = () => finish();
        const handle = (s: AgentSignal) => {
          if (done) return;
          if (s.kind === 'agent-gone') ctx.io.err(`vmkeeperctl: vmkeeperd went away after event ${follower.cursor}; waiting for it to come back\n`);
          else if (s.kind === 'disconnected') {
            finish(new CtlError(`lost the D-Bus connection: ${s.reason} (resume with --after ${follower.cursor})`, ExitCode.AgentNotRunning));
          } else follower.onSignal(s).catch(finish);
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
