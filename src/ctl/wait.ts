import type { Clock, TimerHandle } from '../lifecycle/clock.js';
import { CtlError, ExitCode, toCtlError } from './errors.js';
import { formatDuration } from './format/time.js';
import { holdSignals, type HeldSignals } from './held-signals.js';
import type { AgentEvent, AgentSignal, MachineInfo, VmkeeperClient } from './model.js';
import type { Progress } from './progress.js';

// --wait: follow one machine's signals until the goal is reached. The watcher subscribes BEFORE the
// command's call is made, holds what arrives, and replays it after a fresh snapshot, ignoring
// property changes older than the snapshot (ResourceVersion only grows).

export type Goal = { kind: 'removed' } | { kind: 'state'; state: 'stopped' | 'running' };

export interface WaitOptions {
  clock: Clock;
  progress: Progress;
  /** Give up after this long; undefined = wait as long as it takes. */
  timeoutMs?: number;
  /** Aborting (Ctrl-C) ends the wait with exit code 130. */
  signal?: AbortSignal;
}

export interface WaitResult {
  /** Final machine state ('removed' for a deletion). */
  state: string;
  elapsedMs: number;
}

export function goalText(goal: Goal): string {
  return goal.kind === 'removed' ? 'the machine to be removed' : `state ${goal.state}`;
}

export class MachineWatcher {
  private constructor(private readonly client: VmkeeperClient, readonly name: string, private readonly signals: HeldSignals) {}

  /** Subscribes now; call before issuing the request the wait is about. */
  static async start(client: VmkeeperClient, name: string): Promise<MachineWatcher> {
    return new MachineWatcher(client, name, await holdSignals(client));
  }

  close(): void {
    this.signals.close();
  }

  /** Resolves when the goal is reached; throws a CtlError (exit 8, or 130 when aborted) otherwise. */
  async until(goal: Goal, o: WaitOptions): Promise<WaitResult> {
    const started = o.clock.now();
    const elapsed = () => o.clock.now() - started;
    let machine: MachineInfo | undefined;
    try {
      machine = await this.client.machine(this.name);
    } catch (err) {
      const e = toCtlError(err);
      if (e.exitCode !== ExitCode.NoSuchMachine) throw e;
      if (goal.kind === 'removed') return this.succeed(o, 'removed', elapsed());
      throw this.failure(o, `${this.name}: the machine no longer exists`);
    }

    return new Promise<WaitResult>((resolve, reject) => {
      let current = machine!;
      let lastEvent: AgentEvent | undefined;
      let settled = false;
      let timer: TimerHandle | undefined;

      const cleanup = () => {
        settled = true;
        timer?.cancel();
        o.signal?.removeEventListener('abort', onAbort);
      };
      const ok = (state: string) => {
        if (settled) return;
        cleanup();
        resolve(this.succeed(o, state, elapsed()));
      };
      const fail = (why: string, code: number = ExitCode.WaitFailed) => {
        if (settled) return;
        cleanup();
        reject(this.failure(o, why, code));
      };
      const onAbort = () => fail(`${this.name}: interrupted while waiting for ${goalText(goal)} (state ${current.state})`, ExitCode.Interrupted);

      const check = () => {
        if (goal.kind === 'state' && current.state === goal.state) return ok(current.state);
        if (current.state === 'error') {
          const why = lastEvent?.message;
          if (why) return fail(`${this.name}: machine entered state error: ${why}`);
          // The reason lives in the record's status message when no event came during the wait.
          void this.client
            .describeMachine(this.name)
            .then((json) => (JSON.parse(json) as { status?: { message?: string } }).status?.message)
            .catch(() => undefined)
            .then((message) => fail(`${this.name}: machine entered state error${message ? `: ${message}` : ''}`));
          return;
        }
        if (goal.kind === 'state' && (current.state === 'terminating' || current.state === 'terminated')) {
          return fail(`${this.name}: the machine is being deleted`);
        }
      };

      const handle = (s: AgentSignal) => {
        if (settled) return;
        switch (s.kind) {
          case 'event':
            if (s.event.machine !== this.name) return;
            lastEvent = s.event;
            o.progress.event(s.event);
            return;
          case 'machine-changed': {
            if (s.path !== current.path) return;
            if (s.changed.resourceVersion !== undefined && s.changed.resourceVersion <= current.resourceVersion) return;
            current = { ...current, ...s.changed };
            o.progress.update(current);
            return check();
          }
          case 'machine-removed':
            if (s.name !== this.name) return;
            if (goal.kind === 'removed') return ok('removed');
            return fail(`${this.name}: the machine was deleted`);
          case 'agent-gone':
            return fail(`${this.name}: vmkeeperd went away (agent disconnected) before ${goalText(goal)}`);
          case 'disconnected':
            return fail(`${this.name}: lost the D-Bus connection (${s.reason}) before ${goalText(goal)}`);
          case 'machine-new':
            return;
        }
      };

      if (o.signal?.aborted) return onAbort();
      o.signal?.addEventListener('abort', onAbort, { once: true });
      if (o.timeoutMs !== undefined) {
        timer = o.clock.setTimer(o.timeoutMs, () =>
          fail(`${this.name}: timed out after ${formatDuration(o.timeoutMs!)} waiting for ${goalText(goal)} (state ${current.state})`),
        );
      }
      o.progress.update(current);
      check();
      this.signals.release(handle);
    });
  }

  private succeed(o: WaitOptions, state: string, elapsedMs: number): WaitResult {
    const what = state === 'removed' ? 'gone' : state;
    o.progress.finish(`${this.name}: ${what} (after ${formatDuration(elapsedMs)})`);
    return { state, elapsedMs };
  }

  private failure(o: WaitOptions, why: string, code: number = ExitCode.WaitFailed): CtlError {
    o.progress.finish();
    return new CtlError(why, code);
  }
}
