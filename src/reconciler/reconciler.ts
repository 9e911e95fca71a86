import type { Clock } from '../lifecycle/clock.js';
import { KeyedTimers, PeriodicTask } from '../lifecycle/timers.js';
import { Backoff } from '../lifecycle/backoff.js';
import type { KeyedLock } from '../lifecycle/keyed-lock.js';
import { Semaphore } from '../lifecycle/semaphore.js';
import type { Logger } from '../logging/logger.js';
import { describeError } from '../machine/errors.js';
import { machineNameFromDomain } from '../machine/names.js';
import { isShuttingDown, type MachineRecord, type MachineState } from '../machine/record.js';
import { lifecycleOf } from '../machine/spec.js';
import { isDomainActive, type DomainSummary, type Hypervisor } from '../hypervisor/port.js';
import type { MachineRecords } from '../service/machine-records.js';
import type { DomainObserver, DomainSnapshot } from '../domains/domain-observer.js';
import type { DomainOwnership } from '../domains/domain-ownership.js';
import type { DomainProvisioner } from '../domains/domain-provisioner.js';
import { OrphanReporter } from './orphan-reporter.js';
import { RestartSchedule } from './restart-schedule.js';
import type { StartGate } from './start-gate.js';
import { StartQueue } from './start-queue.js';
import { GuestStarter, RestoreFailure } from './guest-starter.js';
import type { SavedStates } from '../domains/saved-states.js';

export interface ReconcilerOptions {
  records: MachineRecords;
  hypervisor: Hypervisor;
  observer: () => DomainObserver;
  provisioner: DomainProvisioner;
  ownership: DomainOwnership;
  clock: Clock;
  logger: Logger;
  /** Shared with the sweeper: one hypervisor action per machine at a time. */
  machineLock: KeyedLock;
  resyncIntervalMs: number;
  /** Grace of a power-off the reconciler starts itself, for machines without spec.gracePeriodSec. */
  defaultGracePeriodSec: number;
  concurrency?: number;
  /** Gives a machine whose shutdown the reconciler just began to the sweeper (not awaited). */
  handOff: (name: string) => void;
  /** Held during a drain: no guest starts; its release begins an ordered restore. */
  startGate: StartGate;
  /** Saved states a "save" left, resumed instead of a cold boot. */
  savedStates: SavedStates;
  /** config restore: starts in flight at once, and the spacing of starts during a restore. */
  startOrder: { parallelism: number; delayMs: number };
}

export interface ReconcilerStats {
  /** Reconcile passes run (one machine each), to prove that a settled machine costs none. */
  passes: number;
  /** Periodic resyncs run, to prove a restart of the loop never doubles it. */
  resyncs: number;
}

/**
 * Drives machines that are not being shut down from desired to actual: defines missing domains,
 * starts those whose power is on, shuts down those started behind its back, and keeps
 * status.state true to what libvirt reports. Never touches a domain that is not ours.
 */
export class Reconciler {
  readonly stats: ReconcilerStats = { passes: 0, resyncs: 0 };
  private readonly backoff = new Backoff();
  private readonly queued = new Map<string, Promise<void>>();
  private readonly retryTimers: KeyedTimers;
  private readonly resync: PeriodicTask;
  private readonly limiter: Semaphore;
  private readonly restarts: RestartSchedule;
  private readonly orphans: OrphanReporter;
  private readonly starts: StartQueue;
  private readonly starter: GuestStarter;
  /** Ends the collections of restores begun (agent start, undrain), at the first resync that sees libvirt. */
  private collectionEnds: Array<() => void> = [];
  private running = false;

  constructor(private readonly o: ReconcilerOptions) {
    this.limiter = new Semaphore(o.concurrency ?? 8);
    this.retryTimers = new KeyedTimers(o.clock);
    this.restarts = new RestartSchedule(o.clock);
    this.resync = new PeriodicTask(o.clock, o.resyncIntervalMs, () => this.resyncUnsettled(),
      (err) => o.logger.error(`resync failed: ${describeError(err)}`));
    this.orphans = new OrphanReporter({
      hasRecord: (domainName) => this.recordOf(domainName) !== undefined,
      isMarked: (domainName) => o.ownership.isMarked(domainName),
      report: (domainName, machine) => o.records.event(machine ?? domainName, 'warning', 'OrphanDomain',
        `domain ${domainName} carries the vmkeeper mark but has no machine record; left untouched`),
    });
    this.starter = new GuestStarter(o);
    this.starts = new StartQueue({
      clock: o.clock,
      ...o.startOrder,
      start: (name) => o.machineLock.run(name, () => this.startQueued(name)),
      onError: (name, err) => o.logger.error(`${name}: start failed: ${describeError(err)}`),
    });
    o.startGate.emitter.on('changed', (held) => (held ? this.holdStarts() : this.restoreAll()));
    o.records.emitter.on('machineRemoved', (r) => {
      this.restarts.forget(r.name);
      this.backoff.succeed(r.name);
    });
  }

  /** Idempotent: a second start (e.g. a host shutdown called off twice) must not double the resync loop. */
  start(): void {
    if (this.running) return;
    this.running = true;
    // After a boot every guest is off while its record says power on: start them in order.
    this.collectionEnds.push(this.starts.beginRestore());
    this.resync.start();
  }

  /**
   * Also forgets which domains it saw running: guests stopped by a host shutdown (even one called
   * off later) were stopped on purpose, not behind the agent's back.
   */
  stop(): void {
    this.running = false;
    this.resync.stop();
    this.starts.stop();
    this.collectionEnds = [];
    this.retryTimers.cancelAll();
    this.restarts.forgetSightings();
  }

  /**
   * A record changed or a domain changed state: look at this machine soon. The slot is taken
   * before the machine lock, so a queued reconcile never holds the lock a due force stop needs.
   */
  kick(name: string): Promise<void> {
    if (!this.running) return Promise.resolve();
    // The pass already queued covers this kick; its promise lets a restore wait for it.
    const queued = this.queued.get(name);
    if (queued) return queued;
    const pass = this.limiter.run(() =>
      this.o.machineLock.run(name, async () => {
        this.queued.delete(name);
        await this.reconcile(name);
      }),
    );
    // KeyedLock runs the work a microtask later at the earliest, so this entry is in before the pass removes it.
    this.queued.set(name, pass);
    return pass;
  }

  /** Every machine, as after start-up or a reconnect. */
  resyncAll(): Promise<void> {
    const all = Promise.all(this.o.records.list().map((r) => this.kick(r.name))).then(() => undefined);
    // Only a resync that can see libvirt collects a restore: one while it is still away (at boot
    // libvirtd may come up after the agent) looks at nothing.
    if (this.o.observer().isConnected && this.collectionEnds.length > 0) {
      const ends = this.collectionEnds.splice(0);
      void all.finally(() => ends.forEach((end) => end()));
    }
    return all;
  }

  /**
   * The periodic safety net: every machine the latest listing does not show as settled. A
   * settled one's pass would change nothing, and 10,000 of them cost a promise, a lock and a
   * garbage collection each time (issue 12: idle CPU).
   */
  private resyncUnsettled(): Promise<void> {
    this.stats.resyncs++;
    if (this.collectionEnds.length > 0) return this.resyncAll();
    const observer = this.o.observer();
    const due = this.o.records.list().filter((r) => !this.isSettled(r, observer));
    return Promise.all(due.map((r) => this.kick(r.name))).then(() => undefined);
  }

  /** Record and listing agree, nothing pending: exactly the machines whose pass only confirms a state. */
  private isSettled(r: MachineRecord, observer: DomainObserver): boolean {
    if (!observer.isConnected || isShuttingDown(r) || r.status.message !== '') return false;
    if (this.backoff.failureCount(r.name) > 0 || this.starts.has(r.name) || this.queued.has(r.name)) return false;
    const domain = observer.domain(r.domainName);
    if (!domain) return false;
    const active = isDomainActive(domain.state);
    if (r.spec.power === 'on') return active && r.status.state === 'running' && this.restarts.wasSeenRunning(r.name);
    return !active && r.status.state === 'stopped';
  }

  /** The gate was released (undrain): every machine to start is collected, then started in order. */
  private restoreAll(): void {
    if (!this.running) return; // start() begins one anyway
    this.collectionEnds.push(this.starts.beginRestore());
    void this.resyncAll();
  }

  /** The gate was held: starts not yet begun wait, and each machine shows why (those in flight finish). */
  private holdStarts(): void {
    this.starts.dropWaiting();
    void this.resyncAll();
  }

  /** Not awaited by the observer: a slow domain start must not delay the next poll. */
  onSnapshot(snapshot: DomainSnapshot, changed: ReadonlySet<string>): void {
    for (const domainName of changed) {
      if (!snapshot.has(domainName)) this.o.ownership.forget(domainName);
      const record = this.recordOf(domainName);
      if (record) void this.kick(record.name);
    }
    void this.orphans.review(snapshot).catch((err) => this.o.logger.warn(`orphan check failed: ${describeError(err)}`));
  }

  private recordOf(domainName: string): MachineRecord | undefined {
    const name = machineNameFromDomain(domainName);
    return name === undefined ? undefined : this.o.records.get(name);
  }

  private async reconcile(name: string): Promise<void> {
    this.stats.passes++;
    const record = this.o.records.get(name);
    if (!record || !this.running) return;
    if (isShuttingDown(record) || record.spec.power === 'off') this.restarts.forget(name);
    if (isShuttingDown(record)) return;
    const observer = this.o.observer();
    if (!observer.isConnected) return;
    this.retryTimers.cancel(name);
    try {
      await this.converge(record, observer);
      // A start handed to the queue has not succeeded yet: its backoff stays until it has.
      if (!this.starts.has(name)) this.succeeded(name);
    } catch (err) {
      await this.fail(name, err);
    }
  }

  private async converge(record: MachineRecord, observer: DomainObserver): Promise<void> {
    const domain = observer.domain(record.domainName) ?? (await this.confirmMissing(record));
    const active = isDomainActive(domain.state);
    // The first look at a running domain since it was last off: a saved state must not outlive it.
    // Not while starts are held: a drain may be writing that very file.
    if (active && !this.restarts.wasSeenRunning(record.name) && !this.o.startGate.held) await this.starter.discardStale(record);
    if (record.spec.power === 'on' && active) {
      if (!this.running) return; // a pass that outlived stop() must not count as a sighting
      this.restarts.sawRunning(record.name);
      await this.setState(record.name, 'running');
    } else if (record.spec.power === 'on') {
      await this.startOrWait(record);
    } else if (active) {
      if (await this.mayActOn(record)) await this.beginPowerOff(record);
    } else {
      await this.setState(record.name, 'stopped');
    }
  }

  /**
   * The listing has no domain for the record. It may have missed one that changed state between
   * its two calls, so ask libvirt directly before defining it again.
   */
  private async confirmMissing(record: MachineRecord): Promise<DomainSummary> {
    const state = await this.o.hypervisor.domainState(record.domainName);
    if (state !== undefined) return { name: record.domainName, state };
    await this.o.provisioner.define(record);
    this.o.ownership.defined(record.domainName, record.uuid, record.name);
    this.o.observer().noteState(record.domainName, 'shutoff');
    if (record.status.domainDefined) {
      this.o.records.event(record.name, 'warning', 'DomainUndefined',
        `domain ${record.domainName} was undefined outside the agent; defined it again from the machine record`);
    }
    await this.o.records.update(record.name, (r) => {
      r.status.domainDefined = true;
    });
    return { name: record.domainName, state: 'shutoff' };
  }

  /** Power on, domain off: start it, unless it stopped behind our back and must wait (or stay off). */
  private async startOrWait(record: MachineRecord): Promise<void> {
    const name = record.name;
    if (this.o.startGate.held) {
      // Stopped by the drain on purpose: not an outside stop, and no restart backoff to keep.
      this.restarts.forget(name);
      return this.showWaiting(name, 'stopped', `not started: ${this.o.startGate.reason}`);
    }
    const stoppedOutside = this.restarts.wasSeenRunning(name) && record.status.state === 'running';
    if (stoppedOutside && record.spec.restartPolicy === 'never') return this.keepOff(record);
    if (stoppedOutside) {
      const delay = this.restarts.stoppedOutside(name);
      const seconds = Math.round(delay / 1000);
      this.o.records.event(name, 'warning', 'StoppedOutsideAgent',
        `domain ${record.domainName} stopped outside the agent while its power is on; restarting in ${seconds}s`);
      await this.o.records.update(name, (r) => {
        if (isShuttingDown(r)) return;
        r.status.state = 'stopped';
        r.status.message = `stopped outside the agent; restarting in ${seconds}s`;
      });
    }
    const wait = this.restarts.waitLeft(name);
    if (wait > 0) {
      this.retryTimers.set(name, wait, () => void this.kick(name));
      return;
    }
    if (!(await this.mayActOn(record))) return;
    if (!this.stillWantsStart(name)) return;
    const priority = lifecycleOf(record.spec).startPriority;
    if (this.starts.request(name, priority)) return;
    // An error or an outside-stop message says more than "waiting" and stays until the start.
    const latest = this.o.records.get(name);
    if (latest && latest.status.state !== 'error' && !this.restarts.isPending(name)) {
      await this.showWaiting(name, 'stopped', `waiting for its turn to start (startPriority ${priority})`);
    }
  }

  /** The queue's turn for this machine, under its lock: look again (time passed), then start or resume it. */
  private async startQueued(name: string): Promise<void> {
    const record = this.o.records.get(name);
    if (!record || !this.stillWantsStart(name) || !this.o.observer().isConnected) return;
    if (this.o.startGate.held) return void this.kick(name); // the pass shows why it waits
    try {
      const state = await this.o.hypervisor.domainState(record.domainName);
      if (state === undefined) {
        await this.confirmMissing(record); // undefined by hand while it waited: define it again
      } else if (isDomainActive(state)) {
        // Started outside while it waited: told to the observer, so the pass sees it up and does not ask again.
        this.o.observer().noteState(record.domainName, state);
        return void this.kick(name);
      }
      if (!(await this.mayActOn(record)) || !this.stillWantsStart(name)) return;
      if (this.o.startGate.held) return void this.kick(name);
      await this.begin(record);
    } catch (err) {
      await this.fail(name, err);
    }
  }

  private async begin(record: MachineRecord): Promise<void> {
    const how = await this.starter.start(record, this.restarts.isPending(record.name));
    this.o.observer().noteState(record.domainName, 'running');
    this.restarts.restarted(record.name);
    if (how === 'restored') this.o.logger.info(`${record.name}: resumed from its saved state`);
    await this.setState(record.name, 'running');
    this.succeeded(record.name);
  }

  private succeeded(name: string): void {
    if (this.backoff.failureCount(name) > 0) this.o.logger.info(`${name}: reconciled after earlier failures`);
    this.backoff.succeed(name);
  }

  /** Not started (yet), and why, in the record; written only when it changes. */
  private async showWaiting(name: string, state: MachineState, message: string): Promise<void> {
    const current = this.o.records.get(name);
    if (!current || (current.status.state === state && current.status.message === message)) return;
    await this.o.records.update(name, (r) => {
      if (isShuttingDown(r)) return;
      r.status.state = state;
      r.status.message = message;
    });
  }

  /** restartPolicy "never": the stop becomes the desired power. */
  private async keepOff(record: MachineRecord): Promise<void> {
    let changed = false;
    await this.o.records.update(record.name, (r) => {
      if (isShuttingDown(r) || r.spec.power !== 'on') return;
      r.spec.power = 'off';
      r.status.state = 'stopped';
      r.status.message = '';
      changed = true;
    });
    this.restarts.forget(record.name);
    if (changed) {
      this.o.records.event(record.name, 'warning', 'StoppedOutsideAgent',
        `domain ${record.domainName} stopped outside the agent; restartPolicy is never, so it stays off (power is now off)`);
    }
  }

  /**
   * A delete or power-off may have landed while this pass waited for libvirt (define, the
   * ownership check): read the record again right before starting, under the machine lock.
   */
  private stillWantsStart(name: string): boolean {
    const latest = this.o.records.get(name);
    return latest !== undefined && !isShuttingDown(latest) && latest.spec.power === 'on' && this.running;
  }

  /**
   * Power off, domain running: it was started behind our back. Begin the graceful power-off here
   * (asking the service would change nothing and kick this machine again, forever) and give the
   * machine to the sweeper, which presses the button, presses again and forces at the deadline.
   */
  private async beginPowerOff(record: MachineRecord): Promise<void> {
    const now = this.o.clock.now();
    const grace = record.spec.gracePeriodSec ?? this.o.defaultGracePeriodSec;
    let changed = false;
    await this.o.records.update(record.name, (r) => {
      if (isShuttingDown(r) || r.spec.power !== 'off') return;
      r.status.forceStopAt = now + grace * 1000;
      r.status.gracePeriodSec = grace;
      r.status.state = 'stopping';
      r.status.message = '';
      changed = true;
    });
    if (!changed) return;
    this.o.records.event(record.name, 'warning', 'StartedOutsideAgent',
      `domain ${record.domainName} was started outside the agent while its power is off; shutting it down gracefully`);
    this.o.handOff(record.name);
  }

  /** Checked before the first action on a domain: a foreign one is reported and never touched. */
  private async mayActOn(record: MachineRecord): Promise<boolean> {
    const verdict = await this.o.ownership.check(record.domainName, record);
    if (verdict.kind === 'ours') return true;
    if (verdict.kind === 'missing') return false; // it vanished: the next snapshot kicks this machine again
    const message = `${verdict.reason}; the agent leaves it alone`;
    let changed = false;
    await this.o.records.update(record.name, (r) => {
      if (isShuttingDown(r) || (r.status.state === 'error' && r.status.message === message)) return;
      r.status.state = 'error';
      r.status.message = message;
      changed = true;
    });
    if (changed) this.o.records.event(record.name, 'warning', 'ForeignDomain', message);
    return false;
  }

  private async setState(name: string, state: MachineState): Promise<void> {
    // A settled machine (most of them at every resync) costs no record copy and no lock.
    const current = this.o.records.get(name);
    if (current && current.status.state === state && current.status.message === '') return;
    await this.o.records.update(name, (r) => {
      if (isShuttingDown(r)) return;
      r.status.state = state;
      r.status.message = '';
    });
  }

  private async fail(name: string, err: unknown): Promise<void> {
    const delay = this.backoff.fail(name);
    const message = err instanceof RestoreFailure ? err.message : describeError(err);
    const first = this.backoff.failureCount(name) === 1;
    const restore = err instanceof RestoreFailure;
    // A refused saved state is set aside, so its RestoreFailed comes once even amid other failures.
    if (restore && (first || err.setAside)) this.o.records.event(name, 'warning', 'RestoreFailed', `${message} (retrying with backoff)`);
    else if (first) this.o.records.event(name, 'warning', 'ReconcileFailed', `${message} (retrying with backoff)`);
    else this.o.logger.debug(`${name}: reconcile failed again: ${message}; next try in ${delay} ms`);
    await this.o.records
      .update(name, (r) => {
        if (isShuttingDown(r)) return;
        r.status.state = 'error';
        r.status.message = message;
      })
      .catch((e) => this.o.logger.error(`${name}: could not store the error state: ${describeError(e)}`));
    this.retryTimers.set(name, delay, () => void this.kick(name));
  }
}

