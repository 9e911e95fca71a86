import { describe, expect, it } from 'vitest';
import { ConfigError } from '../../../src/config/errors.js';
import { defaultConfig, specLimitsFrom } from '../../../src/config/config.js';
import { loadConfig } from '../../../src/config/load-config.js';

const FILE = '/etc/vmkeeper/config.yaml';

function enoent(path: string): never {
  throw Object.assign(new Error(`ENOENT: no such file or directory, open '${path}'`), { code: 'ENOENT' });
}

/** loadConfig over an in-memory file system. */
function load(files: Record<string, string>, argv: string[] = [], env: NodeJS.ProcessEnv = {}) {
  return loadConfig({ argv, env, readFile: (p) => (p in files ? files[p]! : enoent(p)) });
}

function loadError(files: Record<string, string>, argv: string[] = [], env: NodeJS.ProcessEnv = {}): ConfigError {
  try {
    load(files, argv, env);
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return err as ConfigError;
  }
  throw new Error('expected a ConfigError');
}

describe('loadConfig: file errors name file:line: key', () => {
  const cases: { name: string; yaml: string; message: string }[] = [
    {
      name: 'string where an integer belongs',
      yaml: 'bus: system\nmachines:\n  sweepIntervalSec: ten\n',
      message: `${FILE}:3: machines.sweepIntervalSec: must be a positive integer (got "ten")`,
    },
    {
      name: 'quoted number is still a string',
      yaml: 'libvirt:\n  callTimeoutSec: "30"\n',
      message: `${FILE}:2: libvirt.callTimeoutSec: must be a positive integer (got "30")`,
    },
    {
      name: 'fraction',
      yaml: '\n\nmachines:\n  pollIntervalMs: 1.5\n',
      message: `${FILE}:4: machines.pollIntervalMs: must be a positive integer (got 1.5)`,
    },
    {
      name: 'zero interval',
      yaml: 'machines:\n  defaultGracePeriodSec: 0\n  resyncIntervalSec: 0\n',
      message: `${FILE}:3: machines.resyncIntervalSec: must be between 1 and 86400 (got 0)`,
    },
    {
      name: 'negative grace',
      yaml: 'machines:\n  defaultGracePeriodSec: -1\n',
      message: `${FILE}:2: machines.defaultGracePeriodSec: must be between 0 and 86400 (got -1)`,
    },
    {
      name: 'timeoutSec above a day',
      yaml: 'hostShutdown:\n  action: leave\n  timeoutSec: 86401\n',
      message: `${FILE}:3: hostShutdown.timeoutSec: must be between 1 and 86400 (got 86401)`,
    },
    {
      name: 'more events kept than memory should hold',
      yaml: 'events:\n  maxCount: 10000000\n',
      message: `${FILE}:2: events.maxCount: must be between 100 and 1000000 (got 10000000)`,
    },
    {
      name: 'unknown top-level key',
      yaml: 'bus: system\nbsu: session\n',
      message: `${FILE}:2: bsu: unknown key (expected one of: bus, libvirt, stateDir, imageDirectories, defaultDomainType, authorization, machines, hostShutdown, restore, events, log)`,
    },
    {
      name: 'unknown nested key',
      yaml: 'log:\n  level: debug\n  colour: true\n',
      message: `${FILE}:3: log.colour: unknown key (expected one of: level, format, journalTransport)`,
    },
    {
      name: 'enum',
      yaml: 'log:\n  level: verbose\n',
      message: `${FILE}:2: log.level: must be one of "error", "warn", "info", "debug" (got "verbose")`,
    },
    {
      name: 'section that is not a mapping',
      yaml: 'machines: 5\n',
      message: `${FILE}:1: machines: must be a mapping (got 5)`,
    },
    {
      name: 'relative image directory',
      yaml: 'imageDirectories:\n  - /srv/images\n  - images\n',
      message: `${FILE}:3: imageDirectories[1]: must be an absolute path (got "images")`,
    },
    {
      name: 'empty image directory list',
      yaml: 'imageDirectories: []\n',
      message: `${FILE}:1: imageDirectories: must be a non-empty list of absolute paths (got [])`,
    },
    {
      name: 'relative state dir',
      yaml: 'stateDir: var/lib/x\n',
      message: `${FILE}:1: stateDir: must be an absolute path (got "var/lib/x")`,
    },
    {
      name: 'bad bus',
      yaml: 'bus: sytem\n',
      message: `${FILE}:1: bus: must be "system", "session" or a D-Bus address like "unix:path=/run/bus" (got "sytem")`,
    },
    {
      name: 'bad libvirt uri',
      yaml: 'libvirt:\n  uri: qemu\n',
      message: `${FILE}:2: libvirt.uri: must be a libvirt URI like "qemu:///system" (got "qemu")`,
    },
    {
      name: 'top level is a list',
      yaml: '- a\n- b\n',
      message: `${FILE}:1: must be a mapping (got ["a","b"])`,
    },
  ];
  it.each(cases)('$name', ({ yaml, message }) => {
    const err = loadError({ [FILE]: yaml });
    expect(err.message).toBe(message);
    expect(err.source).toBe(FILE);
  });

  it.each([
    { name: 'bad indentation', yaml: 'log:\n  level: info\n    format: text\n', line: 2 },
    { name: 'unclosed quote', yaml: 'bus: system\nlibvirt:\n  uri: "qemu:///system\n', line: 3 },
    { name: 'duplicate key', yaml: 'bus: system\nstateDir: /a\nbus: session\n', line: 3 },
  ])('YAML syntax error: $name', ({ yaml, line }) => {
    const err = loadError({ [FILE]: yaml });
    expect(err.message).toMatch(new RegExp(`^${FILE}:${line}: YAML syntax error: `));
    expect(err.line).toBe(line);
    expect(err.message).not.toContain('\n');
  });
});

describe('loadConfig: files', () => {
  it('a missing default file means built-in defaults', () => {
    const { config, configFileFound, configPath } = load({});
    expect(configFileFound).toBe(false);
    expect(configPath).toBe(FILE);
    expect(config).toEqual(defaultConfig());
  });

  it('a missing explicitly given file is an error', () => {
    expect(loadError({}, ['--config', '/etc/other.yaml']).message).toBe('/etc/other.yaml: cannot read config file: ENOENT');
  });

  it('an empty file and empty sections keep the defaults', () => {
    expect(load({ [FILE]: '' }).config).toEqual(defaultConfig());
    expect(load({ [FILE]: 'machines:\nlog:\n' }).config).toEqual(defaultConfig());
  });

  it('reads values and leaves the rest at defaults', () => {
    const { config } = load({ '/x.yaml': 'machines:\n  sweepIntervalSec: 2\nimageDirectories: [/srv/img/]\n' }, ['--config=/x.yaml']);
    expect(config.machines).toEqual({ ...defaultConfig().machines, sweepIntervalSec: 2 });
    expect(config.imageDirectories).toEqual(['/srv/img']);
    expect(Object.isFrozen(config.machines)).toBe(true);
  });
});

describe('loadConfig: flags override the file', () => {
  const yaml = 'bus: session\nlibvirt:\n  uri: test:///default\nstateDir: /srv/a\nimageDirectories: [/srv/i]\nlog:\n  level: warn\n  format: json\n';
  it('every flag', () => {
    const { config } = load({ [FILE]: yaml }, [
      '--bus', 'unix:path=/run/test-bus',
      '--libvirt-uri=qemu:///session',
      '--state-dir', '/srv/b',
      '--image-dir', '/srv/x', '--image-dir=/srv/y',
      '--log-level', 'debug',
      '--log-format', 'text',
    ]);
    expect(config.bus).toBe('unix:path=/run/test-bus');
    expect(config.libvirt.uri).toBe('qemu:///session');
    expect(config.stateDir).toBe('/srv/b');
    expect(config.imageDirectories).toEqual(['/srv/x', '/srv/y']);
    expect(config.log).toEqual({ level: 'debug', format: 'text', journalTransport: 'auto' });
  });
  it('the file alone', () => {
    const { config } = load({ [FILE]: yaml });
    expect(config.bus).toBe('session');
    expect(config.log).toEqual({ level: 'warn', format: 'json', journalTransport: 'auto' });
  });

  it.each([
    { argv: ['--log-level', 'loud'], message: 'command line: --log-level: must be one of "error", "warn", "info", "debug" (got "loud")' },
    { argv: ['--image-dir', 'rel'], message: 'command line: --image-dir: must be an absolute path (got "rel")' },
    { argv: ['--bus'], message: 'command line: --bus: needs a value' },
    { argv: ['--frobnicate'], message: 'command line: --frobnicate: unknown option (see --help)' },
    { argv: ['extra'], message: 'command line: extra: unexpected argument (see --help)' },
  ])('flag error $argv', ({ argv, message }) => {
    expect(loadError({}, argv).message).toBe(message);
  });

  it('--help and --version are returned without reading the file', () => {
    const r = load({ [FILE]: 'bus: [broken' }, ['--help', '-V']);
    expect(r.help).toBe(true);
    expect(r.version).toBe(true);
  });
});

describe('loadConfig: environment', () => {
  it.each([
    { name: 'default', file: '', argv: [], env: {}, stateDir: '/var/lib/vmkeeper' },
    { name: 'STATE_DIRECTORY replaces the default', file: '', argv: [], env: { STATE_DIRECTORY: '/var/lib/vmk' }, stateDir: '/var/lib/vmk' },
    { name: 'first of several', file: '', argv: [], env: { STATE_DIRECTORY: '/a/one:/a/two' }, stateDir: '/a/one' },
    { name: 'file beats it', file: 'stateDir: /srv/file\n', argv: [], env: { STATE_DIRECTORY: '/a/one' }, stateDir: '/srv/file' },
    { name: 'flag beats it', file: '', argv: ['--state-dir', '/srv/flag'], env: { STATE_DIRECTORY: '/a/one' }, stateDir: '/srv/flag' },
  ])('stateDir: $name', ({ file, argv, env, stateDir }) => {
    expect(load({ [FILE]: file }, argv, env).config.stateDir).toBe(stateDir);
  });

  it('a relative STATE_DIRECTORY is an error', () => {
    expect(loadError({}, [], { STATE_DIRECTORY: 'rel' }).message).toBe('environment: STATE_DIRECTORY: must be an absolute path (got "rel")');
  });

  it.each([
    { env: {}, file: '', argv: [], format: 'text' },
    { env: { JOURNAL_STREAM: '8:123' }, file: '', argv: [], format: 'journal' },
    { env: { INVOCATION_ID: 'abc' }, file: '', argv: [], format: 'journal' },
    { env: { INVOCATION_ID: 'abc' }, file: 'log:\n  format: auto\n', argv: [], format: 'journal' },
    { env: { INVOCATION_ID: 'abc' }, file: 'log:\n  format: json\n', argv: [], format: 'json' },
    { env: { INVOCATION_ID: 'abc' }, file: '', argv: ['--log-format', 'text'], format: 'text' },
    { env: {}, file: 'log:\n  format: json\n', argv: ['--log-format', 'auto'], format: 'text' },
  ])('log.format with env $env, file $file, argv $argv -> $format', ({ env, file, argv, format }) => {
    expect(load({ [FILE]: file }, argv, env).config.log.format).toBe(format);
  });
});

describe('loadConfig: directories that would hand host files to guests', () => {
  it.each([
    { name: 'an image dir of /', yaml: 'imageDirectories:\n  - /srv/images\n  - /\n', message: `${FILE}:3: imageDirectories[1]: must not be a system directory or contain one (/)` },
    { name: 'an image dir of /etc', yaml: 'imageDirectories: [/etc]\n', message: `${FILE}:1: imageDirectories[0]: must not be a system directory or contain one (/etc)` },
    { name: 'an image dir inside /proc', yaml: 'imageDirectories: [/proc/self]\n', message: `${FILE}:1: imageDirectories[0]: must not lie inside /proc` },
    {
      name: 'an image dir equal to the state dir',
      yaml: 'stateDir: /srv/vmk\nimageDirectories:\n  - /srv/vmk\n',
      message: `${FILE}:3: imageDirectories[0]: must not be or contain the state directory (/srv/vmk)`,
    },
    {
      name: 'an image dir containing the state dir',
      yaml: 'stateDir: /srv/vmk/state\nimageDirectories: [/srv/vmk]\n',
      message: `${FILE}:2: imageDirectories[0]: must not be or contain the state directory (/srv/vmk/state)`,
    },
    {
      name: 'an image dir inside the agent\'s guest folders',
      yaml: 'stateDir: /srv/vmk\nimageDirectories: [/srv/vmk/guests/web]\n',
      message: `${FILE}:2: imageDirectories[0]: must not overlap /srv/vmk/guests, where the agent writes`,
    },
    { name: 'a state dir of /', yaml: 'bus: system\nstateDir: /\n', message: `${FILE}:2: stateDir: must not be a system directory or contain one (/)` },
    { name: 'a state dir of /usr', yaml: 'stateDir: /usr\n', message: `${FILE}:1: stateDir: must not be a system directory or contain one (/usr)` },
    { name: 'a state dir inside /sys', yaml: 'stateDir: /sys/fs/vmk\n', message: `${FILE}:1: stateDir: must not lie inside /sys` },
    {
      name: 'a state dir that is the default image dir',
      yaml: 'stateDir: /var/lib/vmkeeper/images\n',
      message: `${FILE}:1: stateDir: collides with the default image directory /var/lib/vmkeeper/images, which must not be or contain the state directory (/var/lib/vmkeeper/images)`,
    },
  ])('file: $name', ({ yaml, message }) => {
    expect(loadError({ [FILE]: yaml }).message).toBe(message);
  });

  it.each([
    { argv: ['--image-dir', '/'], env: {}, message: 'command line: --image-dir: /: must not be a system directory or contain one (/)' },
    { argv: ['--state-dir', '/etc'], env: {}, message: 'command line: --state-dir: must not be a system directory or contain one (/etc)' },
    { argv: [], env: { STATE_DIRECTORY: '/var' }, message: 'environment: STATE_DIRECTORY: must not be a system directory or contain one (/var)' },
    {
      argv: ['--state-dir', '/srv/a', '--image-dir', '/srv/a/machines'],
      env: {},
      message: 'command line: --image-dir: /srv/a/machines: must not overlap /srv/a/machines, where the agent writes',
    },
  ])('flags and environment: $argv $env', ({ argv, env, message }) => {
    expect(loadError({}, argv, env).message).toBe(message);
  });

  it('keeps the packaged layout: images beside the agent\'s folders in the state dir', () => {
    const { config } = load({ [FILE]: 'stateDir: /var/lib/vmkeeper\nimageDirectories: [/var/lib/vmkeeper/images, /srv/images]\n' });
    expect(config.imageDirectories).toEqual(['/var/lib/vmkeeper/images', '/srv/images']);
  });

  it('a YAML alias bomb stops with the file named, not a crash', () => {
    const levels = ['a: &a [x, x, x, x, x, x, x, x, x]'];
    for (const [i, name] of ['b', 'c', 'd', 'e', 'f', 'g', 'h', 'i'].entries()) {
      const prev = String.fromCharCode('a'.charCodeAt(0) + i);
      levels.push(`${name}: &${name} [${Array(9).fill(`*${prev}`).join(', ')}]`);
    }
    const err = loadError({ [FILE]: `${levels.join('\n')}\n` });
    expect(err.message).toBe(`${FILE}: YAML aliases expand too far (more than 100): refusing a possible alias bomb`);
    expect(err.source).toBe(FILE);
  });
});

describe('specLimitsFrom', () => {
  it('takes image directories and domain type from the config', () => {
    const { config } = load({ [FILE]: 'imageDirectories: [/srv/i]\ndefaultDomainType: qemu\n' });
    const limits = specLimitsFrom(config);
    expect(limits.imageDirectories).toEqual(['/srv/i']);
    expect(limits.defaultDomainType).toBe('qemu');
    expect(limits.maxCpus).toBeGreaterThan(0);
  });
});
