import type { Clock } from '../lifecycle/clock.js';
import type { OptionSpec, ParsedArgs } from './args.js';
import type { Io } from './io.js';
import type { VmkeeperClient } from './model.js';

// What every command gets: its parsed arguments and the outside world, passed in.

export interface Context {
  io: Io;
  clock: Clock;
  /** --json: machine-readable output on stdout. */
  json: boolean;
  /** Connects on first use (help and usage errors never touch the bus). */
  client(): Promise<VmkeeperClient>;
  /** Aborted on SIGINT/SIGTERM. */
  signal: AbortSignal;
  env: NodeJS.ProcessEnv;
}

export interface Command {
  name: string;
  /** One line for `vmkeeperctl help`. */
  summary: string;
  /** Arguments after the command name, e.g. "NAME [--grace SECONDS] [--wait]". */
  usage: string;
  /** A few lines for `COMMAND --help`. */
  description: string;
  options: OptionSpec[];
  /** Positional argument count allowed; max undefined = unlimited. */
  args: { min: number; max?: number };
  run(ctx: Context, args: ParsedArgs): Promise<number>;
}

export function writeJson(ctx: Pick<Context, 'io'>, value: unknown): void {
  ctx.io.out(`${JSON.stringify(value, null, 2)}\n`);
}
