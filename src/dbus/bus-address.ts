import { sessionBus, systemBus, type MessageBus } from 'dbus-next';

/** `system`, `session`, or any D-Bus address string such as `unix:path=/run/x/bus`. */
export type BusAddress = string;

/** Creates a MessageBus for a config value; the connection is made in the background. */
export function openBus(address: BusAddress): MessageBus {
  if (address === 'system') return sessionBus({ busAddress: plainSocketAddress(process.env.DBUS_SYSTEM_BUS_ADDRESS || 'unix:path=/var/run/dbus/system_bus_socket') });
  if (address === 'session') {
    const env = process.env.DBUS_SESSION_BUS_ADDRESS;
    return env ? sessionBus({ busAddress: plainSocketAddress(env) }) : sessionBus();
  }
  // A D-Bus address is `transport:key=value,...`, possibly several separated by `;`.
  if (!/^[a-z][a-z0-9-]*:/.test(address)) {
    throw new Error(`invalid D-Bus address ${JSON.stringify(address)}: use system, session or e.g. unix:path=/run/bus`);
  }
  return sessionBus({ busAddress: plainSocketAddress(address) });
}

/**
 * Rewrites unix:path=P / unix:abstract=N to dbus-next's unix:socket= form, which connects through
 * Node's own net.Socket. Otherwise dbus-next picks the optional usocket addon whenever it is
 * installed, and its writes stall or fail (EBADF, ECONNRESET) on messages over ~256 KB, e.g. a
 * ListMachines reply with a few thousand machines: the connection is then dead for good. This
 * connection passes no file descriptors, so it needs nothing usocket adds.
 */
export function plainSocketAddress(address: string): string {
  return address
    .split(';')
    .map((one) => {
      const colon = one.indexOf(':');
      if (one.slice(0, colon) !== 'unix') return one;
      const params = one.slice(colon + 1).split(',').map((p) => {
        if (p.startsWith('path=')) return `socket=${p.slice('path='.length)}`;
        if (p.startsWith('abstract=')) return `socket=\u0000${p.slice('abstract='.length)}`;
        return p;
      });
      return `unix:${params.join(',')}`;
    })
    .join(';');
}

/** Opens a bus and waits until the Hello exchange is done, so a bad address fails at startup. */
export async function connectBus(address: BusAddress, timeoutMs = 10_000): Promise<MessageBus> {
  const bus = openBus(address);
  await whenConnected(bus, timeoutMs, `D-Bus at ${address}`);
  return bus;
}

/** A connection that ended or closed before its Hello was answered (the bus went away). */
export class BusConnectionLost extends Error {}

/**
 * Waits until the Hello exchange of a bus just opened is done. A connection that fails (no socket,
 * refused) or ends first rejects at once and is closed: dbus-next itself would hold every call
 * made on it unanswered forever, so a caller bounded by a timeout would wait all of it.
 */
export function whenConnected(bus: MessageBus, timeoutMs: number, what: string): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    let settled = false;
    const timer = setTimeout(() => done(new Error(`timed out connecting to ${what}`)), timeoutMs);
    const onConnect = () => done();
    const onError = (err: unknown) => done(new Error(`cannot connect to ${what}: ${oneLine(err)}`));
    function done(err?: Error) {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      bus.off('connect', onConnect);
      bus.off('error', onError);
      if (err) {
        bus.on('error', () => {}); // the failed connection may still report; it must not crash us
        try {
          bus.disconnect();
        } catch {
          // already closed
        }
        reject(err);
      } else resolve();
    }
    bus.on('connect', onConnect);
    bus.on('error', onError);
    onBusLost(bus, (reason) => done(new BusConnectionLost(`cannot connect to ${what}: ${reason} before the Hello was answered`)));
  });
}

function oneLine(err: unknown): string {
  const text = err instanceof Error ? err.message : String(err);
  return text.split('\n')[0]!.trim();
}

/**
 * Calls onLost once when the bus connection ends (the bus daemon restarted or died). dbus-next's
 * MessageBus does not forward its stream's 'end', so this listens on the stream it wraps.
 */
export function onBusLost(bus: MessageBus, onLost: (reason: string) => void): void {
  let fired = false;
  const fire = (reason: string) => {
    if (fired) return;
    fired = true;
    onLost(reason);
  };
  const stream = (bus as unknown as { _connection?: { on?: (event: string, f: (...args: unknown[]) => void) => void } })._connection;
  stream?.on?.('end', () => fire('the bus closed the connection'));
  stream?.on?.('close', () => fire('the bus connection closed'));
}
