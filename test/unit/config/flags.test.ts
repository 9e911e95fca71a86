import { describe, expect, it } from 'vitest';
import { ConfigError } from '../../../src/config/errors.js';
import { parseFlags, USAGE } from '../../../src/config/flags.js';

describe('parseFlags', () => {
  it.each<[string[], object]>([
    [[], {}],
    [['--config', '/etc/x.yaml'], { config: '/etc/x.yaml' }],
    [['--config=/etc/x.yaml'], { config: '/etc/x.yaml' }],
    [['--bus='], { bus: '' }],
    [['--bus', '--log-level'], { bus: '--log-level' }],
    [['--config', 'a', '--config', 'b'], { config: 'b' }],
    [['--image-dir', '/a', '--image-dir=/b'], { imageDirs: ['/a', '/b'] }],
    [['--libvirt-uri', 'test:///default', '--state-dir', '/s', '--log-level', 'debug', '--log-format', 'json'],
      { libvirtUri: 'test:///default', stateDir: '/s', logLevel: 'debug', logFormat: 'json' }],
    [['-h'], { help: true }],
    [['--help', '--version'], { help: true, version: true }],
    [['-V'], { version: true }],
  ])('%j', (argv, flags) => {
    expect(parseFlags(argv)).toEqual({ help: false, version: false, ...flags });
  });

  it.each<[string[], string]>([
    [['--bus'], 'command line: --bus: needs a value'],
    [['--image-dir'], 'command line: --image-dir: needs a value'],
    [['--frobnicate'], 'command line: --frobnicate: unknown option (see --help)'],
    [['--frobnicate=1'], 'command line: --frobnicate: unknown option (see --help)'],
    [['-x'], 'command line: -x: unknown option (see --help)'],
    [['-hV'], 'command line: -hV: unknown option (see --help)'],
    [['--help=yes'], 'command line: --help: unknown option (see --help)'],
    [['--'], 'command line: --: unknown option (see --help)'],
    [['extra'], 'command line: extra: unexpected argument (see --help)'],
    [['--bus', 'session', 'extra'], 'command line: extra: unexpected argument (see --help)'],
  ])('%j is refused', (argv, message) => {
    expect(() => parseFlags(argv)).toThrow(ConfigError);
    expect(() => parseFlags(argv)).toThrow(message);
  });

  it('the usage text lists every flag the parser takes', () => {
    for (const flag of ['--config PATH', '--bus BUS', '--libvirt-uri URI', '--state-dir DIR', '--image-dir DIR', '--log-level LEVEL', '--log-format FORMAT', '-h, --help', '-V, --version']) {
      expect(USAGE).toContain(flag);
    }
    expect(USAGE.split('\n')[0]).toBe('Usage: vmkeeperd [OPTION]...');
  });
});
