import { Message, MessageType, type MessageBus } from 'dbus-next';
import type { Logger } from '../logging/logger.js';
import { describeError } from '../machine/errors.js';
import type { Actor } from '../service/api.js';

// Who sent the method call being served: the bus daemon vouches for a connection's unix uid
// (GetConnectionUnixUser), never the message body. Answers are cached per unique name and
// forgotten when that name leaves the bus.

const DBUS = { destination: 'org.freedesktop.DBus', path: '/org/freedesktop/DBus', interface: 'org.freedesktop.DBus' };
const NAME_OWNER_CHANGED = `type='signal',sender='${DBUS.destination}',interface='${DBUS.interface}',member='NameOwnerChanged'`;

export interface InboundCaller {
  sender: string;
  member: string;
}

export class CallerIdentity {
  private current: InboundCaller | undefined;
  private readonly uids = new Map<string, Promise<number | undefined>>();
  private installed = false;

  constructor(
    private readonly bus: MessageBus,
    private readonly logger: Logger,
  ) {}

  async start(): Promise<void> {
    if (this.installed) return;
    this.installed = true;
    this.bus.addMethodHandler(this.noteCall);
    this.bus.on('message', this.onMessage);
    await this.bus.call(new Message({ ...DBUS, member: 'AddMatch', signature: 's', body: [NAME_OWNER_CHANGED] }));
  }

  stop(): void {
    if (!this.installed) return;
    this.installed = false;
    this.bus.removeMethodHandler(this.noteCall);
    this.bus.removeListener('message', this.onMessage);
    this.uids.clear();
  }

  /**
   * The call dbus-next is dispatching right now: valid only synchronously at the start of a
   * method, since dbus-next runs method handlers and then the method in one go.
   */
  currentCall(): InboundCaller | undefined {
    return this.current;
  }

  /** The actor behind a call; undefined when the bus cannot tell (then the event names no uid). */
  async actorOf(caller: InboundCaller | undefined): Promise<Actor | undefined> {
    if (!caller) return undefined;
    const uid = await this.uidOf(caller.sender);
    return uid === undefined ? undefined : { uid, call: caller.member };
  }

  /** How many senders are cached (for tests: the cache empties as callers leave). */
  get cachedSenders(): number {
    return this.uids.size;
  }

  /** The unix uid the bus daemon vouches for; undefined when it cannot tell. Cached per sender. */
  uidOf(sender: string): Promise<number | undefined> {
    let uid = this.uids.get(sender);
    if (!uid) {
      uid = this.askBus(sender);
      this.uids.set(sender, uid);
    }
    return uid;
  }

  private async askBus(sender: string): Promise<number | undefined> {
    try {
      const reply = await this.bus.call(new Message({ ...DBUS, member: 'GetConnectionUnixUser', signature: 's', body: [sender] }));
      return Number(reply?.body[0]);
    } catch (err) {
      this.uids.delete(sender);
      this.logger.warn('cannot learn the unix user of a D-Bus caller', { sender, error: describeError(err) });
      return undefined;
    }
  }

  /** Marks `msg` as the call being served; a call dispatched later (after polkit) is marked again then. */
  readonly noteCall = (msg: Message): boolean => {
    this.current = msg.sender && msg.member ? { sender: msg.sender, member: msg.member } : undefined;
    return false;
  };

  private readonly onMessage = (msg: Message): void => {
    if (msg.type !== MessageType.SIGNAL || msg.member !== 'NameOwnerChanged' || msg.sender !== DBUS.destination) return;
    const [name, , newOwner] = (msg.body ?? []) as [unknown, unknown, unknown];
    if (typeof name === 'string' && newOwner === '') this.uids.delete(name);
  };
}
