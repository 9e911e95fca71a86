import { mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { openJournalSocket, type DatagramSender } from '../../../../src/logging/journal/journal-socket.js';
import { createLogger, type CreateLoggerOptions } from '../../../../src/logging/winston-logger.js';
import { waitFor } from '../../../support/wait.js';

/** A sender that keeps what it is given; `accept` false plays a full socket buffer. */
function recordingSender(accept = true): DatagramSender & { sent: string[]; closed: boolean } {
  const s = {
    sent: [] as string[],
    closed: false,
    send(d: Buffer) {
      if (accept) s.sent.push(d.toString('utf8'));
      return accept;
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
      expect(sender.send(Buffer.from('MESSAGE=hi\n'))).toBe(true);
      await waitFor(() => received.length === 1, { timeoutMs: 5000, what: 'the datagram' });
      expect(received).toEqual(['MESSAGE=hi\n']);
      sender.close();
      expect(sender.send(Buffer.from('MESSAGE=late\n'))).toBe(false);
    } finally {
      server.close();
    }
  });
});
