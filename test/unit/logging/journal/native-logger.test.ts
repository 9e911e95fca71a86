import { mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { MAX_PENDING_DATAGRAMS, openJournalSocket, type DatagramSender, type UnixDgramModule } from '../../../../src/logging/journal/journal-socket.js';
import { createLogger, type CreateLoggerOptions } from '../../../../src/logging/winston-logger.js';
import { waitFor } from '../../../support/wait.js';

/** A sender that keeps what it is given; `accept` false plays a full socket buffer. */
function recordingSender(accept = true): DatagramSender & { sent: string[]; closed: boolean } {
  const s = {
    sent: [] as string[],
    closed: false,
    send(d: Buffer, onRefused: () => void) {
      if (accept) s.sent.push(d.toString('utf8'));
      else onRefused();
    },
    close() {
      s.closed = true;
    },
  };
  return s;
}

function capture(options: Omit<CreateLoggerOptions, 'stream'>) {
  const stream = new PassThrough();
  let out = '';
  stream.on('data', (chunk: Buffer) => (out += chunk.toString()));
  const logger = createLogger({ ...options, stream });
  return { logger, lines: async () => (await logger.close(), out.split('\n').slice(0, -1)) };
}

describe('the logger with a journal socket', () => {
  it('sends journal entries as datagrams and writes nothing to the stream', async () => {
    const journal = recordingSender();
    const c = capture({ level: 'info', format: 'journal', journal });
    c.logger.info('web-1: machine web-1 created', { machine: 'web-1', reason: 'Created', sequence: 1, uid: 0, call: 'CreateMachine' });
    c.logger.debug('below the level');
    expect(await c.lines()).toEqual([]);
    expect(journal.sent).toHaveLength(1);
    expect(journal.sent[0]).toMatch(/^MESSAGE=web-1: machine web-1 created machine=web-1 reason=Created sequence=1 uid=0 call=CreateMachine\nPRIORITY=6\nSYSLOG_IDENTIFIER=vmkeeperd\nMESSAGE_ID=[0-9a-f]{32}\nVMKEEPER_MACHINE=web-1\n/);
    expect(journal.closed).toBe(true);
  });

  it('an entry the socket refuses is written as the stream line instead', async () => {
    const journal = recordingSender(false);
    const c = capture({ level: 'debug', format: 'journal', journal });
    c.logger.warn('db: forced', { machine: 'db' });
    expect(await c.lines()).toEqual(['<4>db: forced machine=db']);
  });

  it('text and json formats never use the socket', async () => {
    const journal = recordingSender();
    const c = capture({ level: 'debug', format: 'json', journal, now: () => new Date(0) });
    c.logger.info('hello');
    expect(await c.lines()).toHaveLength(1);
    expect(journal.sent).toEqual([]);
  });
});

describe('openJournalSocket', () => {
  let dir: string | undefined;
  afterEach(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
    dir = undefined;
  });

  it('names why there is no socket, and does not throw', () => {
    expect(openJournalSocket('/nonexistent/journal/socket')).toMatch(/^cannot connect to \/nonexistent\/journal\/socket: connect ENOENT/);
    expect(openJournalSocket('/x', () => undefined)).toMatch(/unix-dgram/);
  });

  it('delivers datagrams to a listening unix datagram socket', async () => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'vmk-journal-'));
    const socketPath = path.join(dir, 'socket');
    const unix = createRequire(import.meta.url)('unix-dgram') as {
      createSocket(t: 'unix_dgram', onMessage: (m: Buffer) => void): { bind(p: string): void; close(): void };
    };
    const received: string[] = [];
    const server = unix.createSocket('unix_dgram', (m) => received.push(m.toString('utf8')));
    server.bind(socketPath);
    try {
      const sender = openJournalSocket(socketPath);
      if (typeof sender === 'string') throw new Error(sender);
      const refused: string[] = [];
      sender.send(Buffer.from('MESSAGE=hi\n'), () => refused.push('hi'));
      await waitFor(() => received.length === 1, { timeoutMs: 5000, what: 'the datagram' });
      expect(received).toEqual(['MESSAGE=hi\n']);
      sender.close();
      sender.send(Buffer.from('MESSAGE=late\n'), () => refused.push('late'));
      expect(refused).toEqual(['late']);
    } finally {
      server.close();
    }
  });
});

/** A socket whose queue holds `room` datagrams until the test drains it and says "writable". */
function fakeAddon(room: number) {
  const listeners = new Map<string, (...args: unknown[]) => void>();
  const delivered: string[] = [];
  let queued = 0;
  let failNext: number | undefined;
  const socket = {
    on: (event: string, l: (...args: unknown[]) => void) => void listeners.set(event, l),
    connect() {},
    send(buf: Buffer, cb: (err?: Error) => void) {
      if (failNext !== undefined) return cb(Object.assign(new Error('send'), { code: failNext, syscall: 'send' }));
      if (queued >= room) return cb(new Error('congestion'));
      queued++;
      delivered.push(buf.toString());
      cb();
    },
    close() {},
  };
  const addon: UnixDgramModule = { createSocket: () => socket };
  return {
    addon,
    delivered,
    drainAll() {
      queued = 0;
      listeners.get('writable')?.();
    },
    failSends: () => (failNext = -111),
  };
}

describe('the queue behind a full journal socket', () => {
  const open = (f: ReturnType<typeof fakeAddon>) => {
    const s = openJournalSocket('/fake', () => f.addon);
    if (typeof s === 'string') throw new Error(s);
    return s;
  };

  it('holds entries while the socket is full and sends them in order once it is writable', () => {
    const f = fakeAddon(2);
    const sender = open(f);
    const refused: number[] = [];
    for (let i = 0; i < 5; i++) sender.send(Buffer.from(`e${i}`), () => refused.push(i));
    expect(f.delivered).toEqual(['e0', 'e1']);
    f.drainAll();
    expect(f.delivered).toEqual(['e0', 'e1', 'e2', 'e3']);
    f.drainAll();
    expect(f.delivered).toEqual(['e0', 'e1', 'e2', 'e3', 'e4']);
    expect(refused).toEqual([]);
  });

  it('refuses past its bound, and hands back what is still queued at close', () => {
    const f = fakeAddon(0);
    const sender = open(f);
    const refused: number[] = [];
    for (let i = 0; i < MAX_PENDING_DATAGRAMS + 3; i++) sender.send(Buffer.from(`e${i}`), () => refused.push(i));
    expect(refused).toEqual([MAX_PENDING_DATAGRAMS, MAX_PENDING_DATAGRAMS + 1, MAX_PENDING_DATAGRAMS + 2]);
    sender.close();
    expect(refused).toHaveLength(MAX_PENDING_DATAGRAMS + 3);
    expect(f.delivered).toEqual([]);
  });

  it('a socket that fails (journald gone) refuses the entry at once', () => {
    const f = fakeAddon(10);
    const sender = open(f);
    f.failSends();
    let refused = 0;
    sender.send(Buffer.from('x'), () => refused++);
    expect(refused).toBe(1);
  });

  it('the logger writes a refused entry as its stream line, queued ones too at close', async () => {
    const f = fakeAddon(1);
    const journal = open(f);
    const c = capture({ level: 'debug', format: 'journal', journal });
    c.logger.info('first');
    c.logger.info('second', { machine: 'm' });
    expect(f.delivered).toHaveLength(1);
    expect(await c.lines()).toEqual(['<6>second machine=m']);
  });
});
