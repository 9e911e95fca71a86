import type { Clock } from '../lifecycle/clock.js';
import { KeyedTimers, PeriodicTask } from '../lifecycle/timers.js';
import { Backoff } from '../lifecycle/backoff.js';
import type { KeyedLock } from '../lifecycle/keyed-lock.js';
import { Semaphore } from '../lifecycle/semaphore.js';
import type { Logger } from '../logging/logger.js';
import { describeError } from '../machine/errors.js';
import { machineNameFromDomain } from '../machine/names.js';
import { cloneRecord, isDeleting, isShuttingDown, type MachineRecord, type MachineStatus } from '../machine/record.js';
import { isDomainActive, type Hypervisor } from '../hypervisor/port.js';
import type { DomainObserver, DomainSnapshot } from '../domains/domain-observer.js';
import type { DomainProvisioner } from '../domains/domain-provisioner.js';
import type { DomainOwnership } from '../domains/domain-ownership.js';
import type { MachineRecords } from '../service/machine-records.js';
import { nextShutdownStep } from './shutdown-step.js';

export interface SweeperOptions {
  records: MachineRecords;
  hypervisor: Hypervisor;
  observer: () => DomainObserver;
  provisioner: DomainProvisioner;
  /** Tells our domains from others under our names: the sweeper never touches a foreign one. */
  ownership: Pick<DomainOwnership, 'check' | 'forget'>;
  clock: Clock;
  logger: Logger;
  machineLock: KeyedLock;
  sweepIntervalMs: number;
  shutdownRetryIntervalMs: number;
  concurrency?: number;
}

export interface SweepStats {
  machines: number;
  durationMs: number;
}


/**
 * Owns every machine being deleted or powered off: presses the power button, presses it again,
 * destroys the domain at the deadline (on a timer set for the deadline itself, not the next
 * sweep), then completes the power-off or removes domain, disks and record. Every step is
 * idempotent and persisted first, so a restart goes on where the last run stopped.
 */
export class Sweeper {
  private readonly tracked = new Set<string>();
  private readonly timers: KeyedTimers;
  private readonly periodicSweep: PeriodicTask;
  private readonly backoff = new Backoff();
  private readonly limiter: Semaphore;
  private running = false;
  private lastSweep: { at: number; stats: SweepStats } | undefined;

  constructor(private readonly o: SweeperOptions) {
    this.limiter = new Semaphore(o.concurrency ?? 16);
    this.timers = new KeyedTimers(o.clock);
    this.periodicSweep = new PeriodicTask(o.clock, o.sweepIntervalMs, () => this.sweepOnce(),
      (err) => o.logger.error(`sweep failed: ${describeError(err)}`));
    const track = (r: MachineRecord) => (isShuttingDown(r) ? this.tracked.add(r.name) : this.untrack(r.name));
    o.records.emitter.on('machineAdded', track);
    o.records.emitter.on('machineChanged', track);
    o.records.emitter.on('machineRemoved', (r) => this.untrack(r.name));
  }

  get trackedCount(): number {
    return this.tracked.size;
  }

  get lastSweepAt(): number {
    return this.lastSweep?.at ?? 0;
  }

  start(): void {
    for (const r of this.o.records.list()) if (isShuttingDown(r)) this.tracked.add(r.name);
    this.running = true;
    this.periodicSweep.start();
  }

  stop(): void {
    this.running = false;
    this.periodicSweep.stop();
    this.timers.cancelAll();
  }

  kick(name: string): Promise<void> {
    const r = this.o.records.get(name);
    if (!this.running || !r || !isShuttingDown(r)) return Promise.resolve();
    this.tracked.add(name);
    return this.sweepMachine(name);
  }

  /** The safety net: one pass over every machine being shut down. */
  async sweepOnce(): Promise<SweepStats> {
    const started = this.o.clock.now();
    const names = [...this.tracked];
    await Promise.all(names.map((n) => this.sweepMachine(n)));
    const stats = { machines: names.length, durationMs: this.o.clock.now() - started };
    this.lastSweep = { at: this.o.clock.now(), stats };
    return stats;
  }

  /** A domain we track changed state (e.g. the guest powered itself off): act now. */
  onSnapshot(_snapshot: DomainSnapshot, changed: ReadonlySet<string>): void {
    for (const domainName of changed) {
      const name = machineNameFromDomain(domainName);
      if (name && this.tracked.has(name)) void this.sweepMachine(name);
    }
  }

  sweepMachine(name: string): Promise<void> {
    // A due force stop skips the queue: its lateness is the one number that must stay small.
    return this.o.machineLock.run(name, () => (this.forceDue(name) ? this.step(name) : this.limiter.run(() => this.step(name))));
  }

  private forceDue(name: string): boolean {
    const r = this.o.records.get(name);
    return r !== undefined && r.status.forceStopAt > 0 && this.o.clock.now() >= r.status.forceStopAt;
  }

  private untrack(name: string): void {
    this.tracked.delete(name);
    this.timers.cancel(name);
  }

  private async step(name: string): Promise<void> {
    const record = this.o.records.get(name);
    if (!record || !isShuttingDown(record) || !this.running) return;
    if (!this.o.observer().isConnected) return; // the reconnect kicks us again
    try {
      await this.advance(record);
      this.backoff.succeed(name);
    } catch (err) {
      const delay = this.backoff.fail(name);
      this.o.records.event(name, 'warning', 'CleanupFailed', `${describeError(err)}; retrying in ${Math.round(delay / 1000)}s`);
      this.schedule(name, this.o.clock.now() + delay);
    }
  }

  private async advance(record: MachineRecord): Promise<void> {
    const name = record.name;
    const verdict = await this.o.ownership.check(record.domainName, record);
    if (verdict.kind === 'foreign') return this.leaveForeignDomain(record, verdict.reason);
    const observed = this.o.observer().domain(record.domainName)?.state;
    // Confirm "off" with a fresh query before acting on it: the snapshot may be a poll old.
    const state = isDomainActive(observed) ? observed : await this.o.hypervisor.domainState(record.domainName);
    const now = this.o.clock.now();
    const step = nextShutdownStep(record, isDomainActive(state), now, this.o.shutdownRetryIntervalMs);
    switch (step.kind) {
      case 'wait':
        this.schedule(name, step.until);
        return;
      case 'request':
      case 'retry':
        await this.pressPowerButton(record, step.kind, now);
        if (step.kind === 'request' && step.thenForce) {
          // A late first step: the press is in, the deadline gone. Unless the press alone
          // turned the guest off, destroy it now.
          if (isDomainActive(await this.o.hypervisor.domainState(record.domainName))) await this.forceStop(record, this.o.clock.now());
          await this.finish(name);
          return;
        }
        this.schedule(name, Math.min(now + this.o.shutdownRetryIntervalMs, record.status.forceStopAt || Infinity));
        return;
      case 'force':
        await this.forceStop(record, now);
        await this.finish(name);
        return;
      case 'finish':
        await this.finish(name);
        return;
    }
  }

  private async pressPowerButton(record: MachineRecord, kind: 'request' | 'retry', now: number): Promise<void> {
    const name = record.name;
    await this.o.records.update(name, (r) => {
      if (r.status.shutdownRequestedAt === 0) r.status.shutdownRequestedAt = now;
      r.status.lastShutdownSentAt = now;
      r.status.state = isDeleting(r) ? 'terminating' : 'stopping';
    });
    await this.o.hypervisor.shutdownDomain(record.domainName);
    if (kind === 'retry') {
      this.o.records.event(name, 'normal', 'ShutdownRetried', 'ACPI shutdown sent again');
      return;
    }
    const left = Math.round((record.status.forceStopAt - now) / 1000);
    this.o.records.event(name, 'normal', 'ShutdownRequested',
      left > 0 ? `ACPI shutdown sent; force stop in ${left}s` : 'ACPI shutdown sent; the deadline has passed: force stop follows');
  }

  private async forceStop(record: MachineRecord, now: number): Promise<void> {
    // Destroy and persist in parallel: the destroy must not wait for an fsync. Should the agent
    // die before the write lands, the restart merely reports the stop as ShutdownCompleted.
    const issued = this.o.clock.now();
    const persisted = this.o.records.update(record.name, (r) => {
      if (r.status.shutdownRequestedAt === 0) r.status.shutdownRequestedAt = now;
      r.status.forceStoppedAt = now;
    });
    const destroyed = this.o.hypervisor.destroyDomain(record.domainName).then(() => this.o.clock.now() - issued);
    const [, took] = await Promise.all([persisted, destroyed]);
    const late = Math.max(0, issued - record.status.forceStopAt);
    this.o.records.event(record.name, 'warning', 'ForceStopped',
      `grace period of ${record.status.gracePeriodSec}s ran out: domain destroyed (issued ${late} ms after the deadline, took ${took} ms)`);
  }

  /**
   * The domain is off: finish the power-off, or take the machine apart. Which of the two is
   * decided inside the record update, so a delete that lands while a power-off finishes keeps its
   * deadline and goes on to deletion.
   */
  private async finish(name: string): Promise<void> {
    let seen: MachineRecord | undefined;
    const updated = await this.o.records.update(name, (r) => {
      seen = cloneRecord(r);
      if (!isShuttingDown(r)) return; // powered on again meanwhile: the reconciler owns it now
      if (isDeleting(r)) {
        r.status.state = 'terminated';
        return;
      }
      clearShutdown(r.status);
      r.status.state = 'stopped';
    });
    if (!updated || !seen || !isShuttingDown(seen)) return;
    const wentByItself = seen.status.shutdownRequestedAt > 0 && seen.status.forceStoppedAt === 0;
    if (!isDeleting(seen)) {
      if (wentByItself) this.o.records.event(name, 'normal', 'ShutdownCompleted', 'guest shut down by itself');
      this.o.records.event(name, 'normal', 'Stopped', 'machine is powered off');
      return;
    }
    const announce = seen.status.state !== 'terminated' && seen.status.state !== 'stopped';
    if (announce && wentByItself) this.o.records.event(name, 'normal', 'ShutdownCompleted', 'guest shut down by itself');
    await this.o.hypervisor.undefineDomain(updated.domainName);
    this.o.ownership.forget(updated.domainName); // a domain defined later under this name is checked afresh
    await this.removeRecordAndFiles(name, 'domain, disks and record removed');
  }

  private async removeRecordAndFiles(name: string, deletedMessage: string): Promise<void> {
    await this.o.provisioner.removeFiles(name);
    await this.o.records.remove(name);
    this.untrack(name);
    this.o.records.event(name, 'normal', 'Deleted', deletedMessage);
  }

  /**
   * A domain under this machine's name that is not ours (no mark, or another UUID) is never shut
   * down, destroyed or undefined: a deletion removes only the record and the machine's files, a
   * power-off ends with the machine in error, as the reconciler leaves it.
   */
  private async leaveForeignDomain(record: MachineRecord, reason: string): Promise<void> {
    const name = record.name;
    const message = `${reason}; the agent leaves it alone`;
    let outcome: 'delete' | 'give up power-off' | 'nothing' = 'nothing';
    await this.o.records.update(name, (r) => {
      if (isDeleting(r)) outcome = 'delete';
      else if (isShuttingDown(r)) outcome = 'give up power-off';
      if (outcome !== 'give up power-off') return;
      clearShutdown(r.status);
      r.status.state = 'error';
      r.status.message = message;
    });
    if (outcome === 'nothing') return; // powered on again meanwhile: the reconciler owns it now
    if (outcome === 'give up power-off') {
      this.o.records.event(name, 'warning', 'ForeignDomain', `${message}; the power-off changes nothing`);
      return;
    }
    this.o.records.event(name, 'warning', 'ForeignDomain', `${message}; deleting only the record and the machine's files`);
    await this.removeRecordAndFiles(name, 'record and files removed; the foreign domain was left untouched');
  }

  private schedule(name: string, at: number): void {
    if (!this.running) return;
    this.timers.set(name, at - this.o.clock.now(), () => void this.sweepMachine(name));
  }
}

/** The power-off is over (done, or given up): the sweeper lets go of the machine. */
function clearShutdown(status: MachineStatus): void {
  status.shutdownRequestedAt = 0;
  status.lastShutdownSentAt = 0;
  status.forceStopAt = 0;
  status.forceStoppedAt = 0;
  status.gracePeriodSec = 0;
}
