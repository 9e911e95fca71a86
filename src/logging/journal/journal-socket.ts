import { createRequire } from 'node:module';
import { getSystemErrorName } from 'node:util';

// The datagram socket to journald. Node has no unix datagram sockets, so this uses the
// unix-dgram addon; a missing addon or socket means "no journal socket", never a crash.

export const JOURNAL_SOCKET_PATH = '/run/systemd/journal/socket';

/** Sends one datagram; false when it did not go (the caller then writes the stream line). */
export interface DatagramSender {
  send(datagram: Buffer): boolean;
  close(): void;
}

interface UnixDgramSocket {
  on(event: 'error' | 'congestion' | 'writable', listener: (...args: unknown[]) => void): void;
  connect(path: string): void;
  send(buf: Buffer, callback: (err?: Error) => void): void;
  close(): void;
}
interface UnixDgramModule {
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
  socket.on('writable', () => {});
  socket.connect(socketPath);
  if (failure) {
    socket.close();
    return `cannot connect to ${socketPath}: ${failure}`;
  }
  let open = true;
  return {
    send(datagram) {
      if (!open) return false;
      const attempt = () => {
        const result: { outcome: 'sent' | 'congestion' | 'error' } = { outcome: 'error' };
        // The addon calls back synchronously: an error, or "congestion" (a full socket buffer).
        socket.send(datagram, (err) => (result.outcome = !err ? 'sent' : err.message === 'congestion' ? 'congestion' : 'error'));
        return result.outcome;
      };
      const first = attempt();
      if (first !== 'error') return first === 'sent';
      // journald restarted (a new socket at the same path): connect again once, then give up on this entry.
      failure = undefined;
      socket.connect(socketPath);
      return failure === undefined && attempt() === 'sent';
    },
    close() {
      if (!open) return;
      open = false;
      socket.close();
    },
  };
}
