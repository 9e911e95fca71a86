import type { Config } from '../config/config.js';
import { isDomainActive, type Hypervisor } from '../hypervisor/port.js';
import type { Clock } from '../lifecycle/clock.js';
import { TypedEmitter } from '../lifecycle/emitter.js';
import type { Logger } from '../logging/logger.js';
import { describeError } from '../machine/errors.js';
import { savedStateFile } from '../machine/paths.js';
import type { MachineRecord } from '../machine/record.js';
import { lifecycleOf } from '../machine/spec.js';
import type { EventType } from '../service/api.js';
import { StopCoordinator, type GuestOutcome, type StopProgress } from './coordinator.js';
import type { ShutdownRecords } from './shutdown-records.js';
import { planStop, type PlannedGroup, type PlannedGuest } from './stop-plan.js';
import type { GuestResult, ShutdownRecord, ShutdownRecordMachine, StopKind, StopProcedure, StopRunOptions } from './stop-procedure.js';

// The StopProcedure: plans from the domains libvirt lists as active and the machine records,
// persists the ShutdownRecord at the start, at each group end and at the end, and records the
// events (host-level ones with machine name ""). A drain records its own DrainStarted/Completed;
// the per-machine events are recorded here for every kind.

/** The part of the agent's MachineRecords a run reads and writes events through. */
export interface StopMachines {
  list(): readonly MachineRecord[];
  event(machine: string, type: EventType, reason: string, message: string): unknown;
}

export type StopSettings = Pick<Config['hostShutdown'], 'timeoutSec' | 'parallelism' | 'groups'> & { retryIntervalMs: number };

export interface StopRunProgress extends StopProgress {
  kind: StopKind;
}

export interface PolicyStopProcedureOptions {
  hypervisor: Hypervisor;
  clock: Clock;
  logger: Logger;
  machines: StopMachines;
  records: ShutdownRecords;
  stateDir: string;
  /** Read at the start of each run, so a reload of these keys takes effect. */
  settings: () => StopSettings;
  /** Saves in flight at once: below the libvirt adapter's call slots (see coordinator.ts). */
  maxConcurrentSaves: number;
  pollIntervalMs?: number;
  destroyTimeoutMs?: number;
}

/** What a run announces as it goes; each listener gets its own copy of a record. */
export interface StopRunEvents {
  /** The run's record was first written (result in-progress). */
  started: (record: ShutdownRecord) => void;
  /** After every look at the guests: STATUS= and EXTEND_TIMEOUT_USEC, a drain's progress. */
  progress: (p: StopRunProgress) => void;
  /** The run's record is final (completed or cancelled). */
  ended: (record: ShutdownRecord) => void;
}

const LABEL: Record<StopKind, string> = { 'host-shutdown': 'host shutdown', 'service-stop': 'service stop', drain: 'drain' };

/** The event of each result, as [type, reason] (written so the MESSAGE_ID test finds the reasons). */
const EVENT_OF: Record<GuestResult, [EventType, string] | undefined> = {
  clean: ['normal', 'ShutdownCompleted'],
  saved: ['normal', 'Saved'],
  forced: ['warning', 'ForceStopped'],
  failed: ['warning', 'StopFailed'],
  'left-running': undefined,
};

export class PolicyStopProcedure implements StopProcedure {
  readonly events: TypedEmitter<StopRunEvents>;
  private current: { promise: Promise<ShutdownRecord>; signal: AbortSignal | undefined } | undefined;

  constructor(private readonly o: PolicyStopProcedureOptions) {
    this.events = new TypedEmitter<StopRunEvents>((err) => o.logger.error(`stop run listener failed: ${describeError(err)}`));
  }

  /**
   * One run at a time: a call during a run gets that run's result. A run already cancelled is
   * not joined: the new one starts once it has wound down (a shutdown announced again right after
   * logind took one back).
   */
  run(options: StopRunOptions): Promise<ShutdownRecord> {
    const before = this.current;
    if (before && !before.signal?.aborted) return before.promise;
    const promise: Promise<ShutdownRecord> = (before ? before.promise.then(() => undefined, () => undefined) : Promise.resolve())
      .then(() => this.execute(options))
      .finally(() => {
        if (this.current?.promise === promise) this.current = undefined;
      });
    this.current = { promise, signal: options.signal };
    return promise;
  }

  private async execute({ kind, signal }: StopRunOptions): Promise<ShutdownRecord> {
    const { clock, logger } = this.o;
    const s = this.o.settings();
    const label = LABEL[kind];
    const startedAt = clock.now();
    const runDeadlineAt = startedAt + s.timeoutSec * 1000;
    const active = await this.activeDomains(label, runDeadlineAt, signal);
    const groups = planStop({
      activeDomains: active ?? [],
      machines: this.o.machines.list().map((r) => {
        const l = lifecycleOf(r.spec);
        return { name: r.name, domainName: r.domainName, action: l.hostShutdownAction, priority: l.shutdownPriority };
      }),
      groups: s.groups,
      timeoutSec: s.timeoutSec,
    });
    const record = newRecord(this.o.records.newId(startedAt), kind, startedAt, s.timeoutSec, groups);
    const hostLevel = kind !== 'drain';
    const total = record.machines.length;
    if (hostLevel) this.o.machines.event('', 'normal', 'HostShutdownStarted', `${label}: stopping ${count(total, 'guest')} in ${count(groups.length, 'priority group')} within ${s.timeoutSec}s`);
    logger.info(`${label}: ${count(total, 'running guest')} in ${count(groups.length, 'group')}; bound ${s.timeoutSec}s`, { record: record.id, parallelism: s.parallelism });
    await this.persist(record);
    this.events.emit('started', structuredClone(record));

    const entry = (g: PlannedGuest) => record.machines.find((m) => m.domain === g.domain)!;
    const coordinator = new StopCoordinator({
      hypervisor: this.o.hypervisor,
      clock,
      logger,
      retryIntervalMs: s.retryIntervalMs,
      parallelism: s.parallelism,
      maxConcurrentSaves: this.o.maxConcurrentSaves,
      savedStateFile: (machine) => savedStateFile(this.o.stateDir, machine),
      pollIntervalMs: this.o.pollIntervalMs,
      destroyTimeoutMs: this.o.destroyTimeoutMs,
      signal,
      label,
      listener: {
        groupStarted: (i) => (record.groups[i]!.startedAt = clock.now()),
        shutdownRequested: (g) => this.o.machines.event(g.machine, 'normal', 'ShutdownRequested', `${label}: ACPI shutdown requested`),
        saveFailed: (g, why) => this.o.machines.event(g.machine, 'warning', 'SaveFailed', `${label}: saving the guest failed (${why}); falling back to shutdown`),
        finished: (g, outcome) => this.onFinished(label, entry(g), outcome),
        groupEnded: async (i) => {
          record.groups[i]!.finishedAt = clock.now();
          await this.persist(record);
        },
        progress: (p) => this.events.emit('progress', { ...p, kind }),
      },
    });
    if (active) await coordinator.run(groups, startedAt, runDeadlineAt);
    record.result = signal?.aborted ? 'cancelled' : 'completed';
    record.finishedAt = clock.now();
    await this.persist(record);
    const summary = summarize(record);
    logger.info(`${label} ${record.result} in ${((record.finishedAt - startedAt) / 1000).toFixed(1)}s: ${summary}`, { record: record.id });
    if (hostLevel) this.o.machines.event('', 'normal', 'HostShutdownCompleted', `${label} ${record.result}: ${summary}`);
    this.events.emit('ended', structuredClone(record));
    return structuredClone(record);
  }

  private onFinished(label: string, m: ShutdownRecordMachine, outcome: GuestOutcome): void {
    m.result = outcome.result;
    m.afterMs = outcome.afterMs;
    m.detail = outcome.detail;
    const e = EVENT_OF[outcome.result];
    if (e) this.o.machines.event(m.machine, e[0], e[1], `${label}: ${outcome.detail}`);
  }

  /** The active domains; undefined when libvirt did not answer before the bound. */
  private async activeDomains(label: string, deadlineAt: number, signal: AbortSignal | undefined): Promise<string[] | undefined> {
    const { clock, logger } = this.o;
    for (;;) {
      try {
        const listed = await this.o.hypervisor.listDomains();
        return listed.filter((d) => isDomainActive(d.state)).map((d) => d.name);
      } catch (err) {
        if (clock.now() >= deadlineAt || signal?.aborted) {
          logger.error(`${label}: cannot list guests (${describeError(err)}); giving up`);
          return undefined;
        }
        logger.warn(`${label}: cannot list guests yet: ${describeError(err)}`);
        await clock.sleep(Math.min(this.o.pollIntervalMs ?? 500, deadlineAt - clock.now()), signal).catch(() => undefined);
      }
    }
  }

  /** A record that cannot be written is logged: stopping the guests matters more. */
  private async persist(record: ShutdownRecord): Promise<void> {
    await this.o.records.save(record).catch((err) =>
      this.o.logger.error(`cannot write shutdown record ${record.id}: ${describeError(err)}`));
  }
}

function newRecord(id: string, kind: StopKind, startedAt: number, boundSec: number, groups: PlannedGroup[]): ShutdownRecord {
  return {
    id,
    kind,
    result: 'in-progress',
    startedAt,
    finishedAt: 0,
    boundSec,
    groups: groups.map((g) => ({ minPriority: g.minPriority, budgetSec: g.budgetSec, startedAt: 0, finishedAt: 0 })),
    machines: groups.flatMap((g, group) => g.guests.map((guest) => ({
      machine: guest.machine,
      domain: guest.domain,
      action: guest.action,
      priority: guest.priority,
      group,
      result: 'pending' as const,
      afterMs: 0,
      detail: '',
    }))),
  };
}

/** "2 shut down cleanly, 1 saved, 1 destroyed, 0 failed, 0 left running". */
export function summarize(r: Pick<ShutdownRecord, 'machines'>): string {
  const n = (result: ShutdownRecordMachine['result']) => r.machines.filter((m) => m.result === result).length;
  return `${n('clean')} shut down cleanly, ${n('saved')} saved, ${n('forced')} destroyed, ${n('failed')} failed, ${n('left-running') + n('pending')} left running`;
}

const count = (n: number, what: string) => `${n} ${what}${n === 1 ? '' : 's'}`;
