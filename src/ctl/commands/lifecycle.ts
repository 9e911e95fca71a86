import { flag, parseSeconds, stringOption, type OptionSpec, type ParsedArgs } from '../args.js';
import { type Context, writeJson } from '../command.js';
import { UsageError } from '../errors.js';
import type { VmkeeperClient } from '../model.js';
import { TerminalProgress, silentProgress } from '../progress.js';
import { MachineWatcher, type Goal } from '../wait.js';

// delete / poweroff / poweron: make the request, and with --wait follow the machine to the goal.

export const WAIT_OPTIONS: OptionSpec[] = [
  { name: 'wait', help: 'follow the machine until the goal is reached; exit 8 if it is not' },
  { name: 'timeout', value: 'SECONDS', help: 'with --wait: give up after SECONDS (default: no limit)' },
];

export interface LifecycleRequest {
  command: string;
  name: string;
  goal: Goal;
  /** The D-Bus call. */
  request(client: VmkeeperClient): Promise<void>;
  /** Printed when not waiting, e.g. "deletion requested". */
  requested: string;
}

export async function requestAndMaybeWait(ctx: Context, args: ParsedArgs, r: LifecycleRequest): Promise<number> {
  const wait = flag(args, 'wait');
  const timeout = stringOption(args, 'timeout');
  if (timeout !== undefined && !wait) throw new UsageError('--timeout only makes sense with --wait', r.command);
  const timeoutMs = timeout !== undefined ? parseSeconds(timeout, 'timeout', r.command) * 1000 : undefined;
  const client = await ctx.client();
  // Subscribe before the call: a test-driver guest can be gone before the reply arrives.
  const watcher = wait ? await MachineWatcher.start(client, r.name) : undefined;
  try {
    await r.request(client);
    if (!watcher) {
      if (ctx.json) writeJson(ctx, { name: r.name, requested: r.command });
      else ctx.io.out(`${r.name}: ${r.requested}\n`);
      return 0;
    }
    if (!ctx.json) ctx.io.out(`${r.name}: ${r.requested}, waiting for ${r.goal.kind === 'removed' ? 'it to be gone' : `state ${r.goal.state}`}\n`);
    const progress = ctx.json ? silentProgress : new TerminalProgress(ctx.io, ctx.clock);
    const result = await watcher.until(r.goal, { clock: ctx.clock, progress, timeoutMs, signal: ctx.signal });
    if (ctx.json) writeJson(ctx, { name: r.name, state: result.state, elapsedSec: Math.round(result.elapsedMs / 1000) });
    return 0;
  } finally {
    watcher?.close();
  }
}
