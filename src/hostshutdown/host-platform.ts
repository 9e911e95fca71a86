import { spawn } from 'node:child_process';
import { closeSync } from 'node:fs';
import { Message, MessageType, sessionBus, systemBus, type MessageBus } from 'dbus-next';
import { BusConnectionLost, onBusLost, whenConnected } from '../dbus/bus-address.js';
import { systemClock, type Clock } from '../lifecycle/clock.js';
import { withTimeout } from '../lifecycle/with-timeout.js';
import type { Logger } from '../logging/logger.js';
import { describeError } from '../machine/errors.js';
import { inhibitWithChild, type InhibitorEntry, type InhibitorLock } from './child-inhibitor.js';

// The agent talks to logind and systemd only through HostPlatform, so unit tests pass a fake.
// The real one uses its own connection to the system bus (the agent's own bus may be a private
// one in development); it needs fd passing (dbus-next + usocket) for the logind lock, and falls
// back to a `systemd-inhibit ... sleep infinity` child when the fd never arrives. A lost
// connection is reported (onConnectionLost) and the next call opens a new one.

export type { InhibitorLock } from './child-inhibitor.js';

export interface HostPlatform {
  /** org.freedesktop.systemd1.Manager.SystemState ("running", "degraded", "stopping", ...). */
  systemState(): Promise<string>;
  /** logind's InhibitDelayMaxUSec: how long logind waits for delay locks at most (a global logind setting). */
  inhibitDelayMaxUSec(): Promise<number>;
  /** A logind "delay" inhibitor lock on shutdown. */
  inhibitShutdown(who: string, why: string): Promise<InhibitorLock>;
  /**
   * Subscribes to logind's PrepareForShutdown(active) on the current connection; after a lost
   * connection, call it again to subscribe on the new one (the listener is replaced, never doubled).
   */
  onPrepareForShutdown(listener: (active: boolean) => void): Promise<void>;
  /** Called once for each system bus connection that is lost (not for close()). */
  onConnectionLost(listener: (reason: string) => void): void;
  close(): void;
}

export interface SystemBusHostPlatformOptions {
  logger: Logger;
  /** Every call to logind/systemd is bounded by this (Inhibit never answers without fd support). */
  callTimeoutMs?: number;
  /** Defaults to the system bus. */
  busAddress?: string;
  /** Program used for the fallback lock. */
  systemdInhibit?: string;
  clock?: Clock;
}

const LOGIN1 = { destination: 'org.freedesktop.login1', path: '/org/freedesktop/login1', interface: 'org.freedesktop.login1.Manager' };
const SYSTEMD1 = { destination: 'org.freedesktop.systemd1', path: '/org/freedesktop/systemd1' };

export class SystemBusHostPlatform implements HostPlatform {
  /** The connection, once its Hello is answered (or while it is being made). */
  private bus: Promise<MessageBus> | undefined;
  private readonly timeoutMs: number;
  private readonly clock: Clock;
  private prepareListener: ((active: boolean) => void) | undefined;
  private lostListener: ((reason: string) => void) | undefined;
  private closed = false;

  constructor(private readonly o: SystemBusHostPlatformOptions) {
    this.timeoutMs = o.callTimeoutMs ?? 3000;
    this.clock = o.clock ?? systemClock;
  }

  async systemState(): Promise<string> {
    const reply = await this.call(new Message({
      ...SYSTEMD1,
      interface: 'org.freedesktop.DBus.Properties',
      member: 'Get',
      signature: 'ss',
      body: ['org.freedesktop.systemd1.Manager', 'SystemState'],
    }));
    const v = reply.body[0] as { value?: unknown };
    if (typeof v?.value !== 'string') throw new Error('SystemState: unexpected reply');
    return v.value;
  }

  async inhibitDelayMaxUSec(): Promise<number> {
    const reply = await this.call(new Message({
      ...LOGIN1,
      interface: 'org.freedesktop.DBus.Properties',
      member: 'Get',
      signature: 'ss',
      body: [LOGIN1.interface, 'InhibitDelayMaxUSec'],
    }));
    const v = (reply.body[0] as { value?: unknown })?.value;
    // A "t" arrives as a bigint from dbus-next.
    if (typeof v !== 'bigint' && typeof v !== 'number') throw new Error('InhibitDelayMaxUSec: unexpected reply');
    return Number(v);
  }

  async inhibitShutdown(who: string, why: string): Promise<InhibitorLock> {
    try {
      const reply = await this.call(new Message({
        ...LOGIN1,
        member: 'Inhibit',
        signature: 'ssss',
        body: ['shutdown', who, why, 'delay'],
      }));
      const fd = reply.body[0];
      if (typeof fd !== 'number' || fd < 0) throw new Error('Inhibit returned no file descriptor');
      let held = true;
      return {
        kind: 'fd',
        release: () => {
          if (!held) return;
          held = false;
          try {
            closeSync(fd);
          } catch {
            /* already closed */
          }
        },
      };
    } catch (err) {
      this.o.logger.warn(`logind Inhibit over D-Bus failed (${describeError(err)}); holding the lock through systemd-inhibit instead`);
      return inhibitWithChild({
        spawn: (args) => spawn(this.o.systemdInhibit ?? 'systemd-inhibit', args, { stdio: ['ignore', 'ignore', 'pipe'] }),
        listInhibitors: () => this.listInhibitors(),
        clock: this.clock,
        logger: this.o.logger,
      }, who, why);
    }
  }

  /** logind's ListInhibitors: who holds which lock, with the holder's pid. */
  async listInhibitors(): Promise<InhibitorEntry[]> {
    const reply = await this.call(new Message({ ...LOGIN1, member: 'ListInhibitors' }));
    const rows = reply.body[0];
    if (!Array.isArray(rows)) throw new Error('ListInhibitors: unexpected reply');
    return rows.map((r: unknown[]) => ({
      what: String(r[0]), who: String(r[1]), why: String(r[2]), mode: String(r[3]), uid: Number(r[4]), pid: Number(r[5]),
    }));
  }

  async onPrepareForShutdown(listener: (active: boolean) => void): Promise<void> {
    this.prepareListener = listener;
    const rule = `type='signal',sender='${LOGIN1.destination}',interface='${LOGIN1.interface}',member='PrepareForShutdown',path='${LOGIN1.path}'`;
    await this.call(new Message({
      destination: 'org.freedesktop.DBus',
      path: '/org/freedesktop/DBus',
      interface: 'org.freedesktop.DBus',
      member: 'AddMatch',
      signature: 's',
      body: [rule],
    }));
  }

  onConnectionLost(listener: (reason: string) => void): void {
    this.lostListener = listener;
  }

  close(): void {
    this.closed = true;
    const bus = this.bus;
    this.bus = undefined;
    void bus?.then((b) => b.disconnect(), () => {});
  }

  /**
   * The system bus connection, made on first use. One that cannot be made (no system bus, as in a
   * container without dbus-daemon) fails this call at once, and the next call tries again.
   */
  private connect(): Promise<MessageBus> {
    if (this.bus) return this.bus;
    const bus = this.o.busAddress
      ? sessionBus({ busAddress: this.o.busAddress, negotiateUnixFd: true } as Parameters<typeof sessionBus>[0])
      : systemBus({ negotiateUnixFd: true });
    const connected = whenConnected(bus, this.timeoutMs, 'the system bus').then(() => {
      bus.on('error', (err: unknown) => this.o.logger.warn(`system bus connection error: ${describeError(err)}`));
      // One dispatcher per connection, so subscribing again on it never doubles the listener.
      bus.on('message', (msg: Message) => {
        if (msg.type === MessageType.SIGNAL && msg.interface === LOGIN1.interface && msg.member === 'PrepareForShutdown') {
          this.prepareListener?.(Boolean(msg.body[0]));
        }
      });
      onBusLost(bus, (reason) => {
        if (this.bus !== connected || this.closed) return; // replaced, or closed by us
        this.bus = undefined;
        this.lostListener?.(reason);
      });
      return bus;
    });
    this.bus = connected;
    connected.catch((err: unknown) => {
      if (this.bus !== connected) return;
      this.bus = undefined;
      // A bus that went away while we connected is lost like one that goes away later: the
      // handler subscribes again once it is back. One that is not there at all is not retried.
      if (err instanceof BusConnectionLost && !this.closed) this.lostListener?.(err.message);
    });
    return connected;
  }

  private async call(msg: Message): Promise<Message> {
    // The connection is made within the call's own bound.
    const reply = await withTimeout(this.clock, this.timeoutMs, async () => (await this.connect()).call(msg),
      () => new Error(`${msg.member} got no answer within ${this.timeoutMs} ms`));
    if (!reply) throw new Error(`${msg.member}: no reply`);
    return reply;
  }
}
