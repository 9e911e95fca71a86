import { ConfigError } from './errors.js';

// Command-line flags. Each one overrides one config key; --help and --version are left to main.ts.

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

const VALUE_FLAGS = {
  '--config': 'config',
  '--bus': 'bus',
  '--libvirt-uri': 'libvirtUri',
  '--state-dir': 'stateDir',
  '--log-level': 'logLevel',
  '--log-format': 'logFormat',
} as const;

export const FLAG_USAGE = `Usage: vmkeeperd [options]
  --config PATH        config file (default /etc/vmkeeper/config.yaml)
  --bus BUS            "system", "session" or a D-Bus address
  --libvirt-uri URI    libvirt connection URI
  --state-dir DIR      state directory (machine records)
  --image-dir DIR      allowed image directory (repeatable; replaces the configured list)
  --log-level LEVEL    error | warn | info | debug
  --log-format FORMAT  journal | text | json | auto
  -h, --help           print this help and exit
  -V, --version        print the version and exit`;

const flagError = (flag: string, why: string) => new ConfigError('command line', undefined, flag, why);

/** Parses argv (without node and the script path). Accepts "--flag value" and "--flag=value". */
export function parseFlags(argv: readonly string[]): Flags {
  const flags: Flags = { help: false, version: false };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === '-h' || arg === '--help') {
      flags.help = true;
      continue;
    }
    if (arg === '-V' || arg === '--version') {
      flags.version = true;
      continue;
    }
    const eq = arg.indexOf('=');
    const name = arg.startsWith('--') && eq > 0 ? arg.slice(0, eq) : arg;
    const isValueFlag = Object.hasOwn(VALUE_FLAGS, name) || name === '--image-dir';
    if (!isValueFlag) {
      throw flagError(name, arg.startsWith('-') ? 'unknown option (see --help)' : 'unexpected argument (see --help)');
    }
    let value: string | undefined;
    if (eq > 0 && arg.startsWith('--')) value = arg.slice(eq + 1);
    else {
      value = argv[i + 1];
      i++;
      if (value === undefined) throw flagError(name, 'needs a value');
    }
    if (name === '--image-dir') (flags.imageDirs ??= []).push(value);
    else flags[VALUE_FLAGS[name as keyof typeof VALUE_FLAGS]] = value;
  }
  return flags;
}
