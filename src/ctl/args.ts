import { UsageError } from './errors.js';

// A small getopt: long options (--name, --name=value), single-letter aliases (-f value), `--` ends
// options, `-` alone is a value (stdin). Options may appear anywhere among the positionals.

export interface OptionSpec {
  /** Long name without dashes. */
  name: string;
  short?: string;
  /** Metavar when the option takes a value (e.g. "SECONDS"); absent for flags. */
  value?: string;
  help: string;
}

export interface ParsedArgs {
  options: Record<string, string | true>;
  positionals: string[];
}

export interface ParseOptions {
  /** Stop at the first positional and return everything from it on in `rest` (for the global pass). */
  stopAtPositional?: boolean;
  /** Command name for error messages. */
  command?: string;
}

export function parseArgs(argv: readonly string[], specs: readonly OptionSpec[], o: ParseOptions = {}): ParsedArgs & { rest: string[] } {
  const options: Record<string, string | true> = {};
  const positionals: string[] = [];
  const find = (token: string): OptionSpec | undefined =>
    token.startsWith('--') ? specs.find((s) => s.name === token.slice(2)) : specs.find((s) => s.short === token.slice(1));
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === '--') {
      if (o.stopAtPositional) return { options, positionals, rest: argv.slice(i + 1) };
      positionals.push(...argv.slice(i + 1));
      break;
    }
    if (arg.length < 2 || !arg.startsWith('-')) {
      if (o.stopAtPositional) return { options, positionals, rest: argv.slice(i) };
      positionals.push(arg);
      continue;
    }
    const eq = arg.startsWith('--') ? arg.indexOf('=') : -1;
    const token = eq >= 0 ? arg.slice(0, eq) : arg;
    const spec = find(token);
    if (!spec) throw new UsageError(`unknown option ${token}`, o.command);
    if (spec.value === undefined) {
      if (eq >= 0) throw new UsageError(`option --${spec.name} takes no value`, o.command);
      options[spec.name] = true;
      continue;
    }
    let value: string | undefined;
    if (eq >= 0) value = arg.slice(eq + 1);
    else {
      value = argv[i + 1];
      i++;
    }
    if (value === undefined) throw new UsageError(`option ${token} needs a value (${spec.value})`, o.command);
    options[spec.name] = value;
  }
  return { options, positionals, rest: [] };
}

/** A non-negative whole number of seconds, or a usage error naming the option. */
export function parseSeconds(value: string, option: string, command?: string): number {
  if (!/^\d+$/.test(value) || Number(value) > 0xffffffff) {
    throw new UsageError(`--${option} wants whole seconds (0 or more), not ${JSON.stringify(value)}`, command);
  }
  return Number(value);
}

export function stringOption(args: ParsedArgs, name: string): string | undefined {
  const v = args.options[name];
  return typeof v === 'string' ? v : undefined;
}

export function flag(args: ParsedArgs, name: string): boolean {
  return args.options[name] === true;
}
