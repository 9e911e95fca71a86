import { describe, expect, it } from 'vitest';
import { stateStyle, styles, useColor } from '../../../../src/ctl/format/style.js';
import { fitWidths, formatTable, truncate } from '../../../../src/ctl/format/table.js';
import { formatAge, formatCountdown, formatDuration, formatTimestamp } from '../../../../src/ctl/format/time.js';

describe('formatTable', () => {
  const rows = [
    ['web-1', 'running', 'on'],
    ['a-very-long-machine-name-indeed', 'terminating', 'on'],
  ];

  it('pads columns with three spaces and no trailing blanks', () => {
    expect(formatTable(['NAME', 'STATE', 'POWER'], rows)).toBe(
      'NAME                              STATE         POWER\n' +
        'web-1                             running       on\n' +
        'a-very-long-machine-name-indeed   terminating   on\n',
    );
  });

  it('fits the width by cutting the widest column with an ellipsis', () => {
    const out = formatTable(['NAME', 'STATE', 'POWER'], rows, { maxWidth: 30 });
    const lines = out.trimEnd().split('\n');
    expect(lines.every((l) => Array.from(l).length <= 30)).toBe(true);
    expect(lines[2]).toBe('a-very-l…   terminati…   on'); // the widest shrinks first, then both evenly
  });

  it('stops cutting at the minimum column width', () => {
    expect(fitWidths([10, 10, 10], 5, 3, 4)).toEqual([4, 4, 4]);
    expect(fitWidths([10, 3], 100, 3, 4)).toEqual([10, 3]);
    expect(fitWidths([10, 8], undefined, 3, 4)).toEqual([10, 8]);
  });

  it('styles after padding, so colour codes do not shift columns', () => {
    const st = styles(true);
    const out = formatTable(['NAME', 'STATE', 'X'], [['a', { text: 'running', style: stateStyle(st, 'running') }, 'y']]);
    expect(out.split('\n')[1]).toBe('a      \x1b[32mrunning\x1b[39m   y');
  });

  it('keeps a cell on one line', () => {
    expect(formatTable(['A'], [['x\ny']])).toBe('A\nx y\n');
  });

  it('truncates by characters, not bytes', () => {
    expect(truncate('ääääää', 4)).toBe('äää…');
    expect(truncate('abc', 3)).toBe('abc');
  });
});

describe('colour', () => {
  it.each<[boolean, NodeJS.ProcessEnv, boolean]>([
    [true, {}, true],
    [false, {}, false],
    [true, { NO_COLOR: '1' }, false],
    [true, { NO_COLOR: '' }, true],
    [true, { TERM: 'dumb' }, false],
  ])('tty=%s env=%j -> %s', (tty, env, expected) => expect(useColor(tty, env)).toBe(expected));

  it('styles nothing when disabled', () => {
    expect(styles(false).red('x')).toBe('x');
    expect(styles(true).red('x')).toBe('\x1b[31mx\x1b[39m');
  });
});

describe('time', () => {
  it.each([
    [0, '0s'],
    [59_999, '59s'],
    [60_000, '1m'],
    [192_000, '3m12s'],
    [720_000, '12m'],
    [7_500_000, '2h5m'],
    [3_600_000, '1h'],
    [3 * 86_400_000 + 4 * 3_600_000, '3d4h'],
    [-5, '0s'],
  ])('formatDuration(%d) = %s', (ms, text) => expect(formatDuration(ms)).toBe(text));

  it('counts down to a deadline', () => {
    expect(formatCountdown(0, 1000)).toBe('');
    expect(formatCountdown(31_000, 1000)).toBe('in 30s');
    expect(formatCountdown(1500, 1000)).toBe('in 1s');
    expect(formatCountdown(1000, 1000)).toBe('now');
    expect(formatCountdown(1000, 5000)).toBe('overdue 4s');
  });

  it('formats ages and timestamps', () => {
    expect(formatAge(0, 1000)).toBe('-');
    expect(formatAge(1000, 61_000)).toBe('1m');
    expect(formatTimestamp(Date.UTC(2026, 0, 2, 3, 4, 5, 678))).toBe('2026-01-02T03:04:05Z');
    expect(formatTimestamp(0)).toBe('-');
  });
});
