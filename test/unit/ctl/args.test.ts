import { describe, expect, it } from 'vitest';
import { parseArgs, parseSeconds, type OptionSpec } from '../../../src/ctl/args.js';
import { UsageError } from '../../../src/ctl/errors.js';

const SPECS: OptionSpec[] = [
  { name: 'json', help: '' },
  { name: 'bus', value: 'ADDRESS', help: '' },
  { name: 'filename', short: 'f', value: 'FILE', help: '' },
  { name: 'wait', help: '' },
  { name: 'help', short: 'h', help: '' },
];

describe('parseArgs', () => {
  it.each<[string[], Record<string, string | true>, string[]]>([
    [['list'], {}, ['list']],
    [['--json', 'list'], { json: true }, ['list']],
    [['list', '--json'], { json: true }, ['list']],
    [['--bus', 'session', 'x'], { bus: 'session' }, ['x']],
    [['--bus=unix:path=/run/a=b', 'x'], { bus: 'unix:path=/run/a=b' }, ['x']],
    [['create', 'web-1', '-f', 'spec.yaml'], { filename: 'spec.yaml' }, ['create', 'web-1']],
    [['create', 'web-1', '-f', '-'], { filename: '-' }, ['create', 'web-1']],
    [['-h'], { help: true }, []],
    [['a', '--', '--json', '-f'], {}, ['a', '--json', '-f']],
    [['--bus', 'a', '--bus', 'b'], { bus: 'b' }, []],
    [['-'], {}, ['-']],
    [['--bus', '--json'], { bus: '--json' }, []],
    [['--bus='], { bus: '' }, []],
    [[''], {}, ['']],
  ])('%j', (argv, options, positionals) => {
    expect(parseArgs(argv, SPECS)).toEqual({ options, positionals, rest: [] });
  });

  it.each<[string[], RegExp]>([
    [['--bogus'], /unknown option --bogus/],
    [['-x'], /unknown option -x/],
    [['--bus'], /option --bus needs a value \(ADDRESS\)/],
    [['-f'], /option -f needs a value \(FILE\)/],
    [['--json=yes'], /option --json takes no value/],
    [['-hf', 'x'], /unknown option -hf/],
    [['-fspec.yaml'], /unknown option -fspec\.yaml/],
    [['-1'], /unknown option -1/],
    [['--bogus=1'], /unknown option --bogus$/],
  ])('%j is a usage error', (argv, message) => {
    expect(() => parseArgs(argv, SPECS, { command: 'create' })).toThrow(message);
    try {
      parseArgs(argv, SPECS, { command: 'create' });
    } catch (err) {
      expect(err).toBeInstanceOf(UsageError);
      expect((err as UsageError).exitCode).toBe(2);
      expect((err as UsageError).command).toBe('create');
    }
  });

  it('stops at the first positional for the global pass', () => {
    expect(parseArgs(['--json', 'delete', 'web-1', '--wait'], SPECS, { stopAtPositional: true })).toEqual({
      options: { json: true },
      positionals: [],
      rest: ['delete', 'web-1', '--wait'],
    });
    expect(parseArgs(['--json', '--', 'delete', '--bogus'], SPECS, { stopAtPositional: true })).toEqual({
      options: { json: true },
      positionals: [],
      rest: ['delete', '--bogus'],
    });
  });
});

describe('parseSeconds', () => {
  it.each([['0', 0], ['30', 30], ['4294967295', 4294967295]])('%s', (text, n) => expect(parseSeconds(text, 'grace')).toBe(n));
  it.each(['-1', '1.5', 'soon', '', '4294967296', '1e3'])('%j is refused', (text) => {
    expect(() => parseSeconds(text, 'grace', 'delete')).toThrow(/--grace wants whole seconds/);
  });
});
