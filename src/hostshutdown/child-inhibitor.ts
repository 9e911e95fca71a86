import type { Clock } from '../lifecycle/clock.js';
import type { Logger } from '../logging/logger.js';
import { describeError } from '../machine/errors.js';

/** A logind "delay" inhibitor lock on shutdown, however it is held. */
export interface InhibitorLock {
  /** 'fd': logind's pipe fd held by us; 'child': a systemd-inhibit child holds it. */
  readonly kind: 'fd' | 'child';
  release(): void;
}

// The fallback lock when logind's fd cannot reach us: a `systemd-inhibit ... sleep infinity`
// child holds it. A child that is alive has not necessarily got the lock (it may still wait for
// logind, or have been refused), so the lock counts as held only once logind lists it.

/** One row of logind's ListInhibitors: a(ssssuu). */
export interface InhibitorEntry {
  what: string;
  who: string;
  why: string;
  mode: string;
  uid: number;
  pid: number;
}

/** The part of a ChildProcess this needs (tests pass a fake). */
export interface InhibitChild {
  readonly pid?: number;
  readonly exitCode: number | null;
  readonly signalCode: NodeJS.Signals | null;
  kill(signal?: NodeJS.Signals): boolean;
  unref(): void;
  once(event: 'exit', listener: (code: number | null) => void): unknown;
  once(event: 'error', listener: (err: Error) => void): unknown;
  readonly stderr?: { on(event: 'data', listener: (chunk: Buffer) => void): unknown } | null;
}

/** systemd-inhibit ran, but logind never listed its lock before the deadline. */
export class InhibitorNotConfirmedError extends Error {
  constructor(readonly pid: number | undefined, readonly waitedMs: number, detail: string) {
    super(`systemd-inhibit (pid ${pid ?? 'unknown'}) holds no shutdown delay lock in logind after ${waitedMs} ms${detail}`);
    this.name = 'InhibitorNotConfirmedError';
  }
}

export interface ChildInhibitorOptions {
  /** Starts systemd-inhibit with these arguments. */
  spawn: (args: string[]) => InhibitChild;
  listInhibitors: () => Promise<InhibitorEntry[]>;
  clock: Clock;
  logger: Logger;
  confirmTimeoutMs?: number;
  pollIntervalMs?: number;
}

const holdsShutdownDelay = (e: InhibitorEntry, pid: number | undefined, who: string) =>
  e.pid === pid && e.who === who && e.mode === 'delay' && e.what.split(':').includes('shutdown');

/** Spawns the child and resolves once logind lists its lock; rejects (child killed) otherwise. */
export async function inhibitWithChild(o: ChildInhibitorOptions, who: string, why: string): Promise<InhibitorLock> {
  const timeoutMs = o.confirmTimeoutMs ?? 5000;
  const pollMs = o.pollIntervalMs ?? 100;
  const child = o.spawn(['--what=shutdown', '--mode=delay', `--who=${who}`, `--why=${why}`, 'sleep', 'infinity']);
  let stderr = '';
  child.stderr?.on('data', (c: Buffer) => (stderr += c.toString()));
  let failed: Error | undefined;
  child.once('exit', (code) => (failed ??= new Error(`systemd-inhibit exited (${code}): ${stderr.trim()}`)));
  child.once('error', (err) => (failed ??= err));
  const release = () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
  };

  const deadline = o.clock.now() + timeoutMs;
  let lastListError = '';
  for (;;) {
    if (failed) throw failed;
    try {
      if ((await o.listInhibitors()).some((e) => holdsShutdownDelay(e, child.pid, who))) break;
      lastListError = '';
    } catch (err) {
      lastListError = `; ListInhibitors failed: ${describeError(err)}`;
    }
    if (failed) throw failed;
    if (o.clock.now() >= deadline) {
      release();
      const err = new InhibitorNotConfirmedError(child.pid, timeoutMs, lastListError);
      o.logger.error(err.message);
      throw err;
    }
    await o.clock.sleep(pollMs);
  }
  child.unref(); // held for the agent's lifetime, but it must not keep the process alive on its own
  return { kind: 'child', release };
}
