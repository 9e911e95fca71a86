import { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { type CreateLoggerOptions, createLogger } from '../../../src/logging/winston-logger.js';

const NOW = new Date('2025-01-02T03:04:05.678Z');

/** A logger writing into memory; lines() closes it and returns what was written. */
function capture(format: CreateLoggerOptions['format'], level: CreateLoggerOptions['level'] = 'debug') {
  const stream = new PassThrough();
  let out = '';
  stream.on('data', (chunk: Buffer) => (out += chunk.toString()));
  const logger = createLogger({ level, format, stream, now: () => NOW });
  return {
    logger,
    async lines() {
      await logger.close();
      return out.split('\n').slice(0, -1);
    },
  };
}

describe('createLogger', () => {
  it.each([
    { level: 'error', prefix: '<3>' },
    { level: 'warn', prefix: '<4>' },
    { level: 'info', prefix: '<6>' },
    { level: 'debug', prefix: '<7>' },
  ] as const)('journal: $level has syslog prefix $prefix', async ({ level, prefix }) => {
    const c = capture('journal');
    c.logger[level]('domain started', { machine: 'web-1', cpus: 2 });
    expect(await c.lines()).toEqual([`${prefix}domain started machine=web-1 cpus=2`]);
  });

  it.each([
    { format: 'journal', line: '<6>hello\\nworld a=1 reason="no space left" empty="" q="say \\"hi\\"" n=12 big=9007199254740993 err=boom' },
    { format: 'text', line: '2025-01-02T03:04:05.678Z INFO  hello\\nworld a=1 reason="no space left" empty="" q="say \\"hi\\"" n=12 big=9007199254740993 err=boom' },
  ] as const)('$format: fields as key=value, quoted when needed, one line', async ({ format, line }) => {
    const c = capture(format);
    c.logger.info('hello\nworld', {
      a: 1,
      reason: 'no space left',
      empty: '',
      q: 'say "hi"',
      n: 12,
      big: 9007199254740993n,
      err: new Error('boom\nstack'),
      skipped: undefined,
    });
    expect(await c.lines()).toEqual([line]);
  });

  it('text: objects render as JSON, quoted as a whole', async () => {
    const c = capture('text');
    c.logger.warn('x', { list: [1, 2], obj: { k: 'v w' } });
    expect(await c.lines()).toEqual(['2025-01-02T03:04:05.678Z WARN  x list=[1,2] obj="{\\"k\\":\\"v w\\"}"']);
  });

  it('journal and text have no colour codes', async () => {
    for (const format of ['journal', 'text'] as const) {
      const c = capture(format);
      c.logger.error('bad');
      const [line] = await c.lines();
      expect(line).not.toMatch(/\u001b/);
    }
  });

  it('json: one object per line; fields cannot override level or msg', async () => {
    const c = capture('json');
    c.logger.error('write failed', { file: '/x y', level: 'debug', msg: 'spoof', big: 5n });
    c.logger.debug('second');
    const lines = await c.lines();
    expect(lines).toHaveLength(2);
    expect(JSON.parse(lines[0]!)).toEqual({ file: '/x y', level: 'error', msg: 'write failed', big: '5', time: NOW.toISOString() });
    expect(JSON.parse(lines[1]!)).toEqual({ level: 'debug', msg: 'second', time: NOW.toISOString() });
  });

  it('json survives cycles', async () => {
    const c = capture('json');
    const loop: Record<string, unknown> = { a: 1 };
    loop.self = loop;
    c.logger.info('cyclic', { loop });
    expect(JSON.parse((await c.lines())[0]!).loop).toEqual({ a: 1, self: '[circular]' });
  });

  it.each([
    { level: 'error', seen: ['<3>e'] },
    { level: 'warn', seen: ['<3>e', '<4>w'] },
    { level: 'info', seen: ['<3>e', '<4>w', '<6>i'] },
    { level: 'debug', seen: ['<3>e', '<4>w', '<6>i', '<7>d'] },
  ] as const)('level $level filters', async ({ level, seen }) => {
    const c = capture('journal', level);
    c.logger.error('e');
    c.logger.warn('w');
    c.logger.info('i');
    c.logger.debug('d');
    expect(await c.lines()).toEqual(seen);
  });

  it('close flushes, is idempotent, and later lines are dropped quietly', async () => {
    const c = capture('journal');
    for (let i = 0; i < 1000; i++) c.logger.info(`line ${i}`);
    const lines = await c.lines();
    expect(lines).toHaveLength(1000);
    c.logger.info('after close');
    await c.logger.close();
  });
});
