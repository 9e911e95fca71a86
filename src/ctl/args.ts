import { parseArgs as splitArgs } from 'node:util';
import { UsageError } from './errors.js';

// vmkeeperctl's option parsing over node:util's parser: long options (--name, --name=value),
// single-letter aliases (-f value), `--` ends options, `-` alone is a value (stdin). Options may
// appear anywhere among the positionals. The errors are ours: usage errors naming the option.

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
  const nodeOptions = Object.fromEntries(
    specs.map((s) => [s.name, { type: s.value === undefined ? 'boolean' as const : 'string' as const, ...(s.short ? { short: s.short } : {}) }]),
  );
  // Not strict: node's messages would neither name the command nor exit as a usage error.
  const { tokens } = splitArgs({ args: [...argv], options: nodeOptions, strict: false, allowPositionals: true, tokens: true });
  for (const t of tokens) {
    if (t.kind === 'option-terminator') {
      if (o.stopAtPositional) return { options, positionals, rest: argv.slice(t.index + 1) };
      positionals.push(...argv.slice(t.index + 1));
      break;
    }
    if (t.kind === 'positional') {
      if (o.stopAtPositional) return { options, positionals, rest: argv.slice(t.index) };
      positionals.push(t.value);
      continue;
    }
    // Node reads -hf as -h -f and -fFILE as -f FILE; each option here is its own word.
    if (argv[t.index] !== t.rawName && !t.rawName.startsWith('--')) throw new UsageError(`unknown option ${argv[t.index]}`, o.command);
    const spec = specs.find((s) => s.name === t.name);
    if (!spec) throw new UsageError(`unknown option ${t.rawName}`, o.command);
    if (spec.value === undefined) {
      if (t.value !== undefined) throw new UsageError(`option --${spec.name} takes no value`, o.command);
      options[spec.name] = true;
      continue;
    }
    if (t.value === undefined) throw new UsageError(`option ${t.rawName} needs a value (${spec.value})`, o.command);
    options[spec.name] = t.value;
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
