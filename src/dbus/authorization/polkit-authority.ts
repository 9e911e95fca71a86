import { Message, Variant, type MessageBus } from 'dbus-next';
import type { Clock } from '../../lifecycle/clock.js';
import { withTimeout } from '../../lifecycle/with-timeout.js';
import { describeError } from '../../machine/errors.js';

// The one polkit call the agent makes: CheckAuthorization for a caller on the bus, as
// systemd-machined does, with the caller named by its unique bus name (a system-bus-name subject).

export const POLKIT_NAME = 'org.freedesktop.PolicyKit1';
const POLKIT_PATH = '/org/freedesktop/PolicyKit1/Authority';
const POLKIT_INTERFACE = 'org.freedesktop.PolicyKit1.Authority';
/** CheckAuthorizationFlags.AllowUserInteraction. */
const ALLOW_USER_INTERACTION = 1;

export interface AuthorizationQuery {
  /** The caller's unique bus name (":1.42"). */
  sender: string;
  action: string;
  /** Only when the call carried ALLOW_INTERACTIVE_AUTHORIZATION: polkit may then ask for a password. */
  allowInteraction: boolean;
}

export type PolkitVerdict = { authorized: true } | { authorized: false; challenge: boolean };

export interface PolkitClient {
  /** Whether polkit is on the bus or activatable there. */
  present(): Promise<boolean>;
  /** Rejects on any polkit error or timeout: the caller fails closed. */
  check(query: AuthorizationQuery): Promise<PolkitVerdict>;
}

export interface BusPolkitClientOptions {
  bus: MessageBus;
  clock: Clock;
  /** Without interaction polkit answers at once; with it a person may be typing a password. */
  timeoutMs: number;
  interactiveTimeoutMs: number;
}

export class BusPolkitClient implements PolkitClient {
  constructor(private readonly o: BusPolkitClientOptions) {}

  async present(): Promise<boolean> {
    const [owned] = (await this.busCall('NameHasOwner', 's', [POLKIT_NAME])) as [boolean];
    if (owned) return true;
    const [activatable] = (await this.busCall('ListActivatableNames', '', [])) as [string[]];
    return activatable.includes(POLKIT_NAME);
  }

  async check(q: AuthorizationQuery): Promise<PolkitVerdict> {
    const timeoutMs = q.allowInteraction ? this.o.interactiveTimeoutMs : this.o.timeoutMs;
    const message = new Message({
      destination: POLKIT_NAME,
      path: POLKIT_PATH,
      interface: POLKIT_INTERFACE,
      member: 'CheckAuthorization',
      signature: '(sa{sv})sa{ss}us',
      body: [['system-bus-name', { name: new Variant('s', q.sender) }], q.action, {}, q.allowInteraction ? ALLOW_USER_INTERACTION : 0, ''],
    });
    const reply = await withTimeout(
      this.o.clock,
      timeoutMs,
      () => this.o.bus.call(message),
      () => new Error(`polkit did not answer within ${timeoutMs} ms`),
    );
    const [[authorized, challenge]] = (reply?.body ?? [[false, false]]) as [[boolean, boolean, unknown]];
    return authorized ? { authorized: true } : { authorized: false, challenge };
  }

  private async busCall(member: string, signature: string, body: unknown[]): Promise<unknown[]> {
    const message = new Message({ destination: 'org.freedesktop.DBus', path: '/org/freedesktop/DBus', interface: 'org.freedesktop.DBus', member, signature, body });
    try {
      const reply = await withTimeout(this.o.clock, this.o.timeoutMs, () => this.o.bus.call(message), () => new Error(`the bus did not answer ${member} within ${this.o.timeoutMs} ms`));
      return reply?.body ?? [];
    } catch (err) {
      throw new Error(`cannot ask the bus whether polkit is there: ${describeError(err)}`, { cause: err });
    }
  }
}
