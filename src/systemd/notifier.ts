import { createRequire } from 'node:module';

// sd_notify(3) for the agent. A no-op without NOTIFY_SOCKET, so the agent runs the same way by
// hand, in tests and under systemd. STATUS= is only sent when the text changed.

export interface Notifier {
  ready(status?: string): void;
  /** Sends STATUS= unless it equals the last status sent. */
  status(text: string): void;
  stopping(status?: string): void;
  /** RELOADING=1: systemd shows "reloading" until the next ready(). */
  reloading(status?: string): void;
  /** Milliseconds systemd expects between watchdog pings, or 0 when the watchdog is off. */
  readonly watchdogIntervalMs: number;
  watchdog(): void;
  /** EXTEND_TIMEOUT_USEC: the current start/stop timeout becomes at least ms from now. */
  extendTimeout(ms: number): void;
  /** The last STATUS= text sent (for logs and tests). */
  readonly lastStatus: string | undefined;
}

export type SendState = (state: string) => void;

/** systemd's watchdog interval for this process from the environment, in ms (0 = off). */
export function watchdogIntervalFromEnv(env: NodeJS.ProcessEnv, pid: number = process.pid): number {
  const usec = Number(env.WATCHDOG_USEC ?? 0);
  if (!Number.isFinite(usec) || usec <= 0) return 0;
  if (env.WATCHDOG_PID && Number(env.WATCHDOG_PID) !== pid) return 0;
  return usec / 1000;
}

export function createNotifier(env: NodeJS.ProcessEnv = process.env, onError?: (err: unknown) => void): Notifier {
  if (!env.NOTIFY_SOCKET) return notifierFrom(() => {}, 0);
  const addon = createRequire(import.meta.url)('sd-notify') as { sendState: SendState };
  const send: SendState = (s) => {
    try {
      addon.sendState(s);
    } catch (err) {
      onError?.(err); // a lost notification must never take the agent down
    }
  };
  return notifierFrom(send, watchdogIntervalFromEnv(env));
}

/** Builds a notifier over any sender; exported so tests can capture what is sent. */
export function notifierFrom(send: SendState, watchdogIntervalMs: number): Notifier {
  const line = (key: string, value: string) => `${key}=${value.replace(/\n/g, ' ')}`;
  let lastStatus: string | undefined;
  const withStatus = (head: string, status?: string) => {
    if (status !== undefined) lastStatus = status;
    send([head, ...(status !== undefined ? [line('STATUS', status)] : [])].join('\n'));
  };
  return {
    watchdogIntervalMs,
    get lastStatus() {
      return lastStatus;
    },
    ready: (status) => withStatus('READY=1', status),
    status: (text) => {
      if (text === lastStatus) return;
      lastStatus = text;
      send(line('STATUS', text));
    },
    stopping: (status) => withStatus('STOPPING=1', status),
    reloading: (status) => withStatus('RELOADING=1', status),
    watchdog: () => send('WATCHDOG=1'),
    extendTimeout: (ms) => send(`EXTEND_TIMEOUT_USEC=${Math.max(0, Math.round(ms * 1000))}`),
  };
}
