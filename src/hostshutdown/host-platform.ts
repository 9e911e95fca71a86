import { spawn } from 'node:child_process';
import { closeSync } from 'node:fs';
import { Message, MessageType, sessionBus, systemBus, type MessageBus } from 'dbus-next';
import { systemClock } from '../lifecycle/clock.js';
import { withTimeout } from '../lifecycle/with-timeout.js';
import type { Logger } from '../logging/logger.js';
import { describeError } from '../machine/errors.js';

// The agent talks to logind and systemd only through HostPlatform, so unit tests pass a fake.
// The real one uses its own connection to the system bus (the agent's own bus may be a private
// one in development); it needs fd passing (dbus-next + usocket) for the logind lock, and falls
// back to a `systemd-inhibit ... sleep infinity` child when the fd never arrives.

export interface InhibitorLock {
  /** 'fd': logind's pipe fd held by us; 'child': a systemd-inhibit child holds it. */
  readonly kind: 'fd' | 'child';
  release(): void;
}

export interface HostPlatform {
  /** org.freedesktop.systemd1.Manager.SystemState ("running", "degraded", "stopping", ...). */
  systemState(): Promise<string>;
  /** A logind "delay" inhibitor lock on shutdown. */
  inhibitShutdown(who: string, why: string): Promise<InhibitorLock>;
  /** Subscribes to logind's PrepareForShutdown(active). */
  onPrepareForShutdown(listener: (active: boolean) => void): Promise<void>;
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
}

const LOGIN1 = { destination: 'org.freedesktop.login1', path: '/org/freedesktop/login1', interface: 'org.freedesktop.login1.Manager' };
const SYSTEMD1 = { destination: 'org.freedesktop.systemd1', path: '/org/freedesktop/systemd1' };

export class SystemBusHostPlatform implements HostPlatform {
  private bus: MessageBus | undefined;
  private readonly timeoutMs: number;

  constructor(private readonly o: SystemBusHostPlatformOptions) {
    this.timeoutMs = o.callTimeoutMs ?? 3000;
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
      return this.inhibitWithChild(who, why);
    }
  }

  async onPrepareForShutdown(listener: (active: boolean) => void): Promise<void> {
    const bus = await this.connect();
    const rule = `type='signal',sender='${LOGIN1.destination}',interface='${LOGIN1.interface}',member='PrepareForShutdown',path='${LOGIN1.path}'`;
    bus.on('message', (msg: Message) => {
      if (msg.type === MessageType.SIGNAL && msg.interface === LOGIN1.interface && msg.member === 'PrepareForShutdown') {
        listener(Boolean(msg.body[0]));
      }
    });
    await this.call(new Message({
      destination: 'org.freedesktop.DBus',
      path: '/org/freedesktop/DBus',
      interface: 'org.freedesktop.DBus',
      member: 'AddMatch',
      signature: 's',
      body: [rule],
    }));
  }

  close(): void {
    const bus = this.bus;
    this.bus = undefined;
    try {
      bus?.disconnect();
    } catch {
      /* closed */
    }
  }

  private async connect(): Promise<MessageBus> {
    if (this.bus) return this.bus;
    const bus = this.o.busAddress
      ? sessionBus({ busAddress: this.o.busAddress, negotiateUnixFd: true } as Parameters<typeof sessionBus>[0])
      : systemBus({ negotiateUnixFd: true });
    bus.on('error', (err: unknown) => this.o.logger.warn(`system bus connection error: ${describeError(err)}`));
    this.bus = bus;
    return bus;
  }

  private async call(msg: Message): Promise<Message> {
    const bus = await this.connect();
    const reply = await withTimeout(systemClock, this.timeoutMs, () => bus.call(msg),
      () => new Error(`${msg.member} got no answer within ${this.timeoutMs} ms`));
    if (!reply) throw new Error(`${msg.member}: no reply`);
    return reply;
  }

  private inhibitWithChild(who: string, why: string): Promise<InhibitorLock> {
    const child = spawn(this.o.systemdInhibit ?? 'systemd-inhibit',
      ['--what=shutdown', '--mode=delay', `--who=${who}`, `--why=${why}`, 'sleep', 'infinity'],
      { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr?.on('data', (c: Buffer) => (stderr += c.toString()));
    return new Promise<InhibitorLock>((resolve, reject) => {
      // systemd-inhibit takes the lock before it runs sleep; still alive after a moment = held.
      const settle = setTimeout(() => {
        child.off('exit', onExit);
        child.unref();
        resolve({
          kind: 'child',
          release: () => {
            if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
          },
        });
      }, 300);
      const onExit = (code: number | null) => {
        clearTimeout(settle);
        reject(new Error(`systemd-inhibit exited (${code}): ${stderr.trim()}`));
      };
      child.once('exit', onExit);
      child.once('error', (err) => {
        clearTimeout(settle);
        reject(err);
      });
    });
  }
}
