import { createRequire } from 'node:module';
import { getSystemErrorName } from 'node:util';

// The datagram socket to journald. Node has no unix datagram sockets, so this uses the
// unix-dgram addon; a missing addon or socket means "no journal socket", never a crash.

export const JOURNAL_SOCKET_PATH = '/run/systemd/journal/socket';

/**
 * Sends datagrams in order. A full socket queue (journald busy) holds entries until the socket is
 * writable again; what cannot go at all (queue over its bound, socket gone, close) is handed back
 * through onRefused, so the caller writes it as a stream line and nothing is lost.
 */
export interface DatagramSender {
  send(datagram: Buffer, onRefused: () => void): void;
  close(): void;
}

/** Entries held while journald drains its queue (the kernel's default queue is only 10 datagrams). */
export const MAX_PENDING_DATAGRAMS = 1000;

export interface UnixDgramSocket {
  on(event: 'error' | 'congestion' | 'writable', listener: (...args: unknown[]) => void): void;
  connect(path: string): void;
  send(buf: Buffer, callback: (err?: Error) => void): void;
  close(): void;
}
export interface UnixDgramModule {
  createSocket(type: 'unix_dgram'): UnixDgramSocket;
}

/** The addon's errors carry a negative errno: "connect ENOENT" reads better than "connect -2". */
function errnoName(err: unknown): string {
  const { code, syscall } = err as { code?: unknown; syscall?: unknown };
  if (typeof code !== 'number' || typeof syscall !== 'string') return String((err as Error).message ?? err);
  try {
    return `${syscall} ${getSystemErrorName(code)}`;
  } catch {
    return `${syscall} ${code}`;
  }
}

function loadAddon(): UnixDgramModule | undefined {
  try {
    return createRequire(import.meta.url)('unix-dgram') as UnixDgramModule;
  } catch {
    return undefined;
  }
}

/** A connected sender, or the reason there is none (no addon, no socket, refused). */
export function openJournalSocket(socketPath = JOURNAL_SOCKET_PATH, load: () => UnixDgramModule | undefined = loadAddon): DatagramSender | string {
  const addon = load();
  if (!addon) return 'the unix-dgram addon cannot be loaded';
  let socket: UnixDgramSocket;
  try {
    socket = addon.createSocket('unix_dgram');
  } catch (err) {
    return `cannot create a datagram socket: ${(err as Error).message}`;
  }
  let failure: string | undefined;
  // connect() and send() report by event; without a listener an 'error' would throw.
  socket.on('error', (err) => (failure ??= errnoName(err)));
  socket.on('congestion', () => {});
  socket.connect(socketPath);
  if (failure) {
    socket.close();
    return `cannot connect to ${socketPath}: ${failure}`;
  }
  return new QueuedSender(socket, socketPath, () => failure, () => (failure = undefined));
}

type Outcome = 'sent' | 'congestion' | 'error';
interface Pending {
  datagram: Buffer;
  onRefused: () => void;
}

class QueuedSender implements DatagramSender {
  private readonly pending: Pending[] = [];
  private open = true;

  constructor(
    private readonly socket: UnixDgramSocket,
    private readonly socketPath: string,
    private readonly failure: () => string | undefined,
    private readonly clearFailure: () => void,
  ) {
    socket.on('writable', () => this.drain());
  }

  send(datagram: Buffer, onRefused: () => void): void {
    if (!this.open) return onRefused();
    // Behind a queue, a new entry waits its turn so the journal keeps the agent's order.
    if (this.pending.length > 0) {
      if (this.pending.length >= MAX_PENDING_DATAGRAMS) return onRefused();
      this.pending.push({ datagram, onRefused });
      return;
    }
    const outcome = this.sendOrReconnect(datagram);
    if (outcome === 'congestion') this.pending.push({ datagram, onRefused });
    else if (outcome === 'error') onRefused();
  }

  close(): void {
    if (!this.open) return;
    this.drain();
    this.open = false;
    for (const p of this.pending.splice(0)) p.onRefused();
    this.socket.close();
  }

  private drain(): void {
    while (this.open && this.pending.length > 0) {
      const outcome = this.sendOrReconnect(this.pending[0]!.datagram);
      if (outcome === 'congestion') return; // the addon emits 'writable' again
      const p = this.pending.shift()!;
      if (outcome === 'error') p.onRefused();
    }
  }

  private attempt(datagram: Buffer): Outcome {
    const result: { outcome: Outcome } = { outcome: 'error' };
    // The addon calls back synchronously: an error, or "congestion" (the socket's queue is full).
    this.socket.send(datagram, (err) => (result.outcome = !err ? 'sent' : err.message === 'congestion' ? 'congestion' : 'error'));
    return result.outcome;
  }

  private sendOrReconnect(datagram: Buffer): Outcome {
    const first = this.attempt(datagram);
    if (first !== 'error') return first;
    // journald restarted (a new socket at the same path): connect again once, then give up on this entry.
    this.clearFailure();
    this.socket.connect(this.socketPath);
    return this.failure() === undefined ? this.attempt(datagram) : 'error';
  }
}
