import { createRequire } from 'node:module';

// sd_notify(3) for the agent. A no-op without NOTIFY_SOCKET, so the agent runs the same way by
// hand, in tests and under systemd.

export interface Notifier {
  ready(status?: string): void;
  status(text: string): void;
  stopping(status?: string): void;
  /** Milliseconds systemd expects between watchdog pings, or 0 when the watchdog is off. */
  readonly watchdogIntervalMs: number;
  watchdog(): void;
  extendTimeout(ms: number): void;
}

type SendState = (state: string) => void;

export function createNotifier(env: NodeJS.ProcessEnv = process.env): Notifier {
  if (!env.NOTIFY_SOCKET) return notifierFrom(() => {}, 0);
  const addon = createRequire(import.meta.url)('sd-notify') as { sendState: SendState };
  const watchdogUsec = Number(env.WATCHDOG_USEC ?? 0);
  const forUs = !env.WATCHDOG_PID || Number(env.WATCHDOG_PID) === process.pid;
  return notifierFrom((s) => addon.sendState(s), forUs && watchdogUsec > 0 ? watchdogUsec / 1000 : 0);
}

/** Builds a notifier over any sender; exported so tests can capture what is sent. */
export function notifierFrom(send: SendState, watchdogIntervalMs: number): Notifier {
  const line = (key: string, value: string) => `${key}=${value.replace(/\n/g, ' ')}`;
  return {
    watchdogIntervalMs,
    ready: (status) => send(['READY=1', ...(status ? [line('STATUS', status)] : [])].join('\n')),
    status: (text) => send(line('STATUS', text)),
    stopping: (status) => send(['STOPPING=1', ...(status ? [line('STATUS', status)] : [])].join('\n')),
    watchdog: () => send('WATCHDOG=1'),
    extendTimeout: (ms) => send(`EXTEND_TIMEOUT_USEC=${Math.round(ms * 1000)}`),
  };
}
