import { TypedEmitter } from '../lifecycle/emitter.js';
import type { Clock } from '../lifecycle/clock.js';
import type { Logger } from '../logging/logger.js';
import { describeError, shuttingDown } from '../machine/errors.js';
import type { StartGate } from '../reconciler/start-gate.js';
import type { Actor, AgentState, EventType } from '../service/api.js';
import type { ShutdownRecord, StopProcedure } from '../hostshutdown/stop-procedure.js';
import type { DrainStateFile } from './drain-state-file.js';

// Drain for maintenance: every machine off (or saved) by its host-shutdown policy and priority,
// with the host staying up, and kept off until Undrain. The drain is persisted before anything
// else happens, so a restart of the agent or of the host keeps the host drained. Machine records
// are never touched: power stays "on", and releasing the start gate brings the guests back.

export type DrainState = 'none' | 'draining' | 'drained';

/** Shown as the reason starts are held (a machine's Message while the host is drained). */
export const DRAIN_REASON = 'host drained for maintenance';

/** Host-level events: recorded with machine name "" (docs/dbus-api.md, "Events"). */
export interface HostEvents {
  record(type: EventType, reason: string, message: string, actor?: Actor): void;
  /** Resolves once every event recorded so far is on disk (a reply comes after its event). */
  flushed(): Promise<void>;
}

/** The agent's state, read to refuse a drain at shutdown and to hand a run over to a host shutdown. */
export interface AgentStateSource {
  info(): { state: AgentState };
  on(event: 'infoChanged', listener: (info: { state: AgentState }) => void): void;
}

export interface DrainControllerOptions {
  file: DrainStateFile;
  gate: StartGate;
  stopProcedure: StopProcedure;
  events: HostEvents;
  agent: AgentStateSource;
  clock: Clock;
  logger: Logger;
}

export interface DrainEvents {
  changed: (state: DrainState) => void;
}

interface ActiveRun {
  abort: AbortController;
  promise: Promise<ShutdownRecord>;
}

const isStopping = (state: AgentState) => state === 'host-shutdown' || state === 'stopping';
// Runs start only once the agent watches libvirt: a drain asked for (or restored) earlier waits.
const isReady = (state: AgentState) => state === 'running' || state === 'degraded';

export class DrainController {
  private current: DrainState = 'none';
  private run: ActiveRun | undefined;
  /** Drain, Undrain and the end of a run change the state one at a time, in call order. */
  private queue: Promise<unknown> = Promise.resolve();
  readonly emitter: TypedEmitter<DrainEvents>;

  constructor(private readonly o: DrainControllerOptions) {
    this.emitter = new TypedEmitter<DrainEvents>((err) => o.logger.error(`drain state listener failed: ${describeError(err)}`));
    o.agent.on('infoChanged', (info) => this.onAgentState(info.state));
  }

  get state(): DrainState {
    return this.current;
  }

  /**
   * At start-up, before the reconciler runs: a persisted drain holds the start gate again. One
   * that had not finished (the agent stopped or crashed during it) runs again once the agent is ready.
   */
  async restore(): Promise<void> {
    const saved = await this.o.file.read();
    if (!saved) return;
    if (saved.damaged) this.o.logger.warn(`drain state file unreadable (${saved.damaged}): the host stays drained until Undrain`);
    this.o.gate.hold(DRAIN_REASON);
    this.setState(saved.state);
    this.o.logger.info(saved.state === 'drained' ? 'the host is drained: no machine is started until Undrain' : 'a drain was under way when the agent stopped: it goes on once libvirt is watched');
    this.startRunIfReady();
  }

  /**
   * Idempotent: a drain under way or done is left as it is (a draining host whose run failed runs
   * it again). ShuttingDown during a host shutdown or a stop of the agent.
   */
  drain(actor?: Actor): Promise<void> {
    return this.serially(async () => {
      if (isStopping(this.o.agent.info().state)) throw shuttingDown();
      // Already draining or drained; only a run that failed is run again.
      if (this.current !== 'none') return this.startRunIfReady();
      await this.o.file.write({ state: 'draining', since: this.o.clock.now() });
      this.o.gate.hold(DRAIN_REASON);
      this.setState('draining');
      this.o.events.record('normal', 'DrainStarted', 'drain for maintenance: stopping every machine by its host-shutdown action and priority', actor);
      this.startRunIfReady();
      await this.o.events.flushed();
    });
  }

  /**
   * Idempotent: nothing to do when the host is not drained. A drain under way is cancelled first
   * (its run stops sending requests; the reply waits until it has stopped). ShuttingDown during a
   * host shutdown or a stop of the agent.
   */
  undrain(actor?: Actor): Promise<void> {
    return this.serially(async () => {
      if (this.current === 'none') return;
      // A host shutdown may be waiting on the drain's run: cancelling it would leave guests running.
      if (isStopping(this.o.agent.info().state)) throw shuttingDown();
      const run = this.run;
      if (run) {
        this.run = undefined;
        run.abort.abort();
        const record = await run.promise.catch((err: unknown) => this.o.logger.warn(`the cancelled drain run failed: ${describeError(err)}`));
        this.o.events.record('normal', 'DrainCancelled', `drain cancelled${record ? ` (${summary(record)})` : ''}`, actor);
      }
      // The file goes first: a crash right after leaves the host undrained, as asked.
      await this.o.file.remove();
      this.o.gate.release();
      this.setState('none');
      this.o.events.record('normal', 'Undrained', 'undrained: machines start again in start-priority order', actor);
      await this.o.events.flushed();
    });
  }

  private startRunIfReady(): void {
    if (this.current !== 'draining' || this.run || !isReady(this.o.agent.info().state)) return;
    const abort = new AbortController();
    const run: ActiveRun = { abort, promise: this.o.stopProcedure.run({ kind: 'drain', signal: abort.signal }) };
    this.run = run;
    run.promise.then(
      (record) => this.serially(() => this.runEnded(run, record)),
      (err: unknown) => this.serially(() => this.runFailed(run, err)),
    ).catch((err: unknown) => this.o.logger.error(`ending the drain failed: ${describeError(err)}`));
  }

  private async runEnded(run: ActiveRun, record: ShutdownRecord): Promise<void> {
    if (this.run !== run) return; // cancelled: Undrain or the agent's stop handles its end
    this.run = undefined;
    await this.o.file.write({ state: 'drained', since: record.finishedAt || this.o.clock.now() });
    this.setState('drained');
    const incomplete = record.machines.some((m) => m.result === 'failed' || m.result === 'left-running');
    this.o.events.record(incomplete ? 'warning' : 'normal', 'DrainCompleted', `drained: ${summary(record)}`);
  }

  private runFailed(run: ActiveRun, err: unknown): void {
    if (this.run !== run) return;
    this.run = undefined;
    // Still draining (and the gate held): a second Drain runs the procedure again.
    this.o.events.record('warning', 'DrainFailed', `the drain's stop run failed (${describeError(err)}); the host stays draining: Drain again to retry, or Undrain`);
  }

  /**
   * The agent stops (its libvirt connection closes next): the run is cancelled, and the drain,
   * still persisted as draining, is finished after the restart. A host shutdown is not a reason:
   * it joins the drain's run (the stop procedure runs one at a time), which stops every guest by
   * the same policy within a bound that began earlier; cancelling it would only make the host
   * shutdown wait for its in-flight saves to end (a save cannot be aborted) and start over.
   */
  async stop(): Promise<void> {
    const run = this.run;
    if (!run) return;
    this.run = undefined;
    run.abort.abort();
    this.o.logger.info('the agent stops: the drain run is cancelled and goes on after the restart');
    await run.promise.catch(() => undefined);
  }

  /** Libvirt watched after start-up, or a host shutdown called off: a pending drain runs now. */
  private onAgentState(state: AgentState): void {
    if (isReady(state)) void this.serially(async () => this.startRunIfReady());
  }

  private setState(state: DrainState): void {
    if (state === this.current) return;
    this.current = state;
    this.emitter.emit('changed', state);
  }

  private serially<T>(body: () => Promise<T> | T): Promise<T> {
    const next = this.queue.then(body);
    this.queue = next.catch(() => undefined);
    return next;
  }
}

/** "3 clean, 1 saved, 1 forced (record 20261205T080102Z-1)": the non-zero counts. */
export function summary(record: ShutdownRecord): string {
  const counts = new Map<string, number>();
  for (const m of record.machines) counts.set(m.result, (counts.get(m.result) ?? 0) + 1);
  const parts = [...counts].map(([result, n]) => `${n} ${result}`);
  return `${parts.length ? parts.join(', ') : 'no machines'} (record ${record.id})`;
}
