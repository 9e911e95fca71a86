import { sessionBus, systemBus, type MessageBus } from 'dbus-next';

/** `system`, `session`, or any D-Bus address string such as `unix:path=/run/x/bus`. */
export type BusAddress = string;

/** Creates a MessageBus for a config value; the connection is made in the background. */
export function openBus(address: BusAddress): MessageBus {
  if (address === 'system') return systemBus();
  if (address === 'session') return sessionBus();
  // A D-Bus address is `transport:key=value,...`, possibly several separated by `;`.
  if (!/^[a-z][a-z0-9-]*:/.test(address)) {
    throw new Error(`invalid D-Bus address ${JSON.stringify(address)}: use system, session or e.g. unix:path=/run/bus`);
  }
  return sessionBus({ busAddress: address });
}

/** Opens a bus and waits until the Hello exchange is done, so a bad address fails at startup. */
export async function connectBus(address: BusAddress, timeoutMs = 10_000): Promise<MessageBus> {
  const bus = openBus(address);
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => done(new Error(`timed out connecting to D-Bus at ${address}`)), timeoutMs);
    const onConnect = () => done();
    const onError = (err: unknown) => done(new Error(`cannot connect to D-Bus at ${address}: ${oneLine(err)}`));
    function done(err?: Error) {
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
  });
  return bus;
}

function oneLine(err: unknown): string {
  const text = err instanceof Error ? err.message : String(err);
  return text.split('\n')[0]!.trim();
}
