import { Message, MessageType, type MessageBus } from 'dbus-next';
import { connectBus } from '../../src/dbus/bus-address.js';
import { waitFor, type WaitOptions } from './wait.js';

// Records signals on a second dbus-next connection, so tests see exactly what other clients see.

export interface RecordedSignal {
  path: string;
  interface: string;
  member: string;
  sender: string;
  body: unknown[];
}

export class SignalRecorder {
  readonly signals: RecordedSignal[] = [];

  private constructor(readonly bus: MessageBus) {
    bus.on('message', (msg: Message) => {
      if (msg.type !== MessageType.SIGNAL) return;
      this.signals.push({ path: msg.path, interface: msg.interface, member: msg.member, sender: msg.sender, body: msg.body });
    });
  }

  /** Connects and subscribes to every signal under `pathNamespace`. */
  static async open(address: string, pathNamespace = '/org/vmkeeper1'): Promise<SignalRecorder> {
    const bus = await connectBus(address);
    bus.on('error', () => {}); // closing under a dying daemon must not fail the test run
    await bus.call(
      new Message({
        destination: 'org.freedesktop.DBus',
        path: '/org/freedesktop/DBus',
        interface: 'org.freedesktop.DBus',
        member: 'AddMatch',
        signature: 's',
        body: [`type='signal',path_namespace='${pathNamespace}'`],
      }),
    );
    return new SignalRecorder(bus);
  }

  /** Signals named `member` (and on `path`, when given) recorded so far. */
  find(member: string, path?: string): RecordedSignal[] {
    return this.signals.filter((s) => s.member === member && (path === undefined || s.path === path));
  }

  /** Waits for the first recorded signal that satisfies `match`. */
  waitFor(match: (s: RecordedSignal) => boolean, options: WaitOptions = {}): Promise<RecordedSignal> {
    return waitFor(() => this.signals.find(match), { what: 'a matching D-Bus signal', ...options });
  }

  clear(): void {
    this.signals.length = 0;
  }

  close(): void {
    this.bus.disconnect();
  }
}

/** PropertiesChanged body -> { property: plain value } (Variants unwrapped). */
export function changedProperties(signal: RecordedSignal): Record<string, unknown> {
  const changed = signal.body[1] as Record<string, { value: unknown }>;
  return Object.fromEntries(Object.entries(changed).map(([k, v]) => [k, v.value]));
}
