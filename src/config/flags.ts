import { parseArgs } from 'node:util';
import { ConfigError } from './errors.js';

// vmkeeperd's command line: each value flag overrides one config key; --help and --version are
// left to main.ts. node:util's parser splits the words; the errors are ours, naming the flag.

export interface Flags {
  config?: string;
  bus?: string;
  libvirtUri?: string;
  stateDir?: string;
  imageDirs?: string[];
  logLevel?: string;
  logFormat?: string;
  help: boolean;
  version: boolean;
}

type ValueKey = Exclude<keyof Flags, 'help' | 'version' | 'imageDirs'>;

interface FlagSpec {
  name: string;
  short?: string;
  /** Metavar of a value flag; absent for a switch. */
  value?: string;
  help: string;
  /** Where a value flag lands in Flags; imageDirs collects every --image-dir. */
  key?: ValueKey;
}

const FLAGS: readonly FlagSpec[] = [
  { name: 'config', value: 'PATH', key: 'config', help: 'config file (default /etc/vmkeeper/config.yaml)' },
  { name: 'bus', value: 'BUS', key: 'bus', help: '"system", "session" or a D-Bus address' },
  { name: 'libvirt-uri', value: 'URI', key: 'libvirtUri', help: 'libvirt connection URI' },
  { name: 'state-dir', value: 'DIR', key: 'stateDir', help: 'state directory (machine records)' },
  { name: 'image-dir', value: 'DIR', help: 'allowed image directory (repeatable; replaces the configured list)' },
  { name: 'log-level', value: 'LEVEL', key: 'logLevel', help: 'error | warn | info | debug' },
  { name: 'log-format', value: 'FORMAT', key: 'logFormat', help: 'journal | text | json | auto' },
  { name: 'help', short: 'h', help: 'print this help and exit' },
  { name: 'version', short: 'V', help: 'print the version and exit' },
];

const flagColumn = (f: FlagSpec) => `${f.short ? `-${f.short}, ` : ''}--${f.name}${f.value ? ` ${f.value}` : ''}`;

/** What --help prints: built from the table above, so it lists exactly the flags parsed. */
export const USAGE = [
  'Usage: vmkeeperd [OPTION]...',
  'Manages libvirt virtual machines and exposes them on D-Bus as org.vmkeeper1.',
  '',
  ...FLAGS.map((f) => `  ${flagColumn(f).padEnd(21)}${f.help}`),
  '',
  'See vmkeeperd(8) and docs/configuration.md.',
].join('\n');

const NODE_OPTIONS = Object.fromEntries(
  FLAGS.map((f) => [f.name, { type: f.value ? 'string' as const : 'boolean' as const, ...(f.short ? { short: f.short } : {}) }]),
);

const flagError = (flag: string, why: string) => new ConfigError('command line', undefined, flag, why);
const unknown = (flag: string) => flagError(flag, 'unknown option (see --help)');

/** Parses argv (without node and the script path). Accepts "--flag value" and "--flag=value". */
export function parseFlags(argv: readonly string[]): Flags {
  // Not strict: node's own messages would not name the flag the way every ConfigError does.
  const { tokens } = parseArgs({ args: [...argv], options: NODE_OPTIONS, strict: false, allowPositionals: true, tokens: true });
  const flags: Flags = { help: false, version: false };
  for (const t of tokens) {
    if (t.kind === 'positional') throw flagError(t.value, 'unexpected argument (see --help)');
    if (t.kind === 'option-terminator') throw unknown('--');
    // -hV is two flags to node; vmkeeperd has always wanted each flag as its own word.
    if (argv[t.index] !== t.rawName && !t.rawName.startsWith('--')) throw unknown(argv[t.index]!);
    const spec = FLAGS.find((f) => f.name === t.name);
    if (!spec) throw unknown(t.rawName);
    if (!spec.value) {
      if (t.value !== undefined) throw unknown(t.rawName);
      flags[spec.name === 'help' ? 'help' : 'version'] = true;
    } else if (t.value === undefined) {
      throw flagError(t.rawName, 'needs a value');
    } else if (spec.key) {
      flags[spec.key] = t.value;
    } else {
      (flags.imageDirs ??= []).push(t.value);
    }
  }
  return flags;
}
