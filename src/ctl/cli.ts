import type { Clock } from '../lifecycle/clock.js';
import { flag, parseArgs, stringOption } from './args.js';
import type { Command, Context } from './command.js';
import { COMMANDS } from './commands/index.js';
import { UsageError, toCtlError } from './errors.js';
import { GLOBAL_OPTIONS, PROGRAM, commandHelp, programHelp } from './help.js';
import type { Io } from './io.js';
import type { VmkeeperClient } from './model.js';

// Parses the command line, runs one command, and turns every failure into a line and an exit code.

export interface CliDeps {
  io: Io;
  clock: Clock;
  env: NodeJS.ProcessEnv;
  /** Opens a client for --bus (system, session or an address). */
  connect(address: string): Promise<VmkeeperClient>;
  signal: AbortSignal;
  commands?: Command[];
}

export async function runCli(argv: readonly string[], deps: CliDeps): Promise<number> {
  const commands = deps.commands ?? COMMANDS;
  let client: VmkeeperClient | undefined;
  let commandName: string | undefined;
  try {
    const globals = parseArgs(argv, GLOBAL_OPTIONS, { stopAtPositional: true });
    commandName = globals.rest[0];
    if (commandName === undefined) {
      if (flag(globals, 'help')) return help(deps.io, commands);
      throw new UsageError('no command given');
    }
    if (commandName === 'help') return helpCommand(deps.io, commands, globals.rest.slice(1));
    const command = commands.find((c) => c.name === commandName);
    if (!command) throw new UsageError(`unknown command ${JSON.stringify(commandName)}`);
    const args = parseArgs(globals.rest.slice(1), [...command.options, ...GLOBAL_OPTIONS], { command: command.name });
    const options = { ...globals.options, ...args.options };
    if (options.help === true) {
      deps.io.out(commandHelp(command));
      return 0;
    }
    const count = args.positionals.length;
    if (count < command.args.min) throw new UsageError(`missing argument: ${command.name} ${command.usage}`, command.name);
    if (command.args.max !== undefined && count > command.args.max) {
      throw new UsageError(`unexpected argument ${JSON.stringify(args.positionals[command.args.max])}`, command.name);
    }
    const bus = stringOption({ options, positionals: [] }, 'bus') ?? deps.env.VMKEEPERCTL_BUS ?? 'system';
    if (!/^(system|session|[a-z][a-z0-9-]*:.+)$/.test(bus)) {
      throw new UsageError(`--bus wants system, session or a D-Bus address such as unix:path=/run/x/bus, not ${JSON.stringify(bus)}`);
    }
    const ctx: Context = {
      io: deps.io,
      clock: deps.clock,
      json: options.json === true,
      env: deps.env,
      signal: deps.signal,
      client: async () => (client ??= await deps.connect(bus)),
    };
    return await command.run(ctx, { options, positionals: args.positionals });
  } catch (err) {
    const e = toCtlError(err);
    deps.io.err(`${PROGRAM}: ${e.message}\n`);
    if (e instanceof UsageError) {
      const hint = e.command ? `${PROGRAM} ${e.command} --help` : `${PROGRAM} help`;
      deps.io.err(`Try '${hint}'.\n`);
    }
    return e.exitCode;
  } finally {
    client?.close();
  }
}

function help(io: Io, commands: Command[]): number {
  io.out(programHelp(commands));
  return 0;
}

function helpCommand(io: Io, commands: Command[], rest: string[]): number {
  if (rest.length === 0) return help(io, commands);
  const command = commands.find((c) => c.name === rest[0]);
  if (!command) throw new UsageError(`no help for unknown command ${JSON.stringify(rest[0])}`);
  io.out(commandHelp(command));
  return 0;
}
