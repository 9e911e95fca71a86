import type { Clock } from '../lifecycle/clock.js';
import { KeyedTimers, PeriodicTask } from '../lifecycle/timers.js';
import { Backoff } from '../lifecycle/backoff.js';
import type { KeyedLock } from '../lifecycle/keyed-lock.js';
import { Semaphore } from '../lifecycle/semaphore.js';
import type { Logger } from '../logging/logger.js';
import { describeError } from '../machine/errors.js';
import { machineNameFromDomain } from '../machine/names.js';
import { isShuttingDown, type MachineRecord, type MachineState } from '../machine/record.js';
import { isDomainActive, type Hypervisor } from '../hypervisor/port.js';
import type { MachineRecords } from '../service/machine-records.js';
import type { DomainObserver, DomainSnapshot } from './domain-observer.js';
import type { DomainProvisioner } from './domain-provisioner.js';

export interface ReconcilerOptions {
  records: MachineRecords;
  hypervisor: Hypervisor;
  observer: () => DomainObserver;
  provisioner: DomainProvisioner;
  clock: Clock;
  logger: Logger;
  /** Shared with the sweeper: one hypervisor action per machine at a time. */
  machineLock: KeyedLock;
  resyncIntervalMs: number;
  concurrency?: number;
  /** Asks the agent to start a graceful power-off (a running domain whose power is "off"). */
  requestPowerOff: (name: string) => Promise<void>;
}

/**
 * Drives machines that are not being shut down from desired to actual: defines missing domains,
 * starts those whose power is on, and keeps status.state true to what libvirt reports.
 */
export class Reconciler {
  private readonly backoff = new Backoff();
  private readonly queued = new Set<string>();
  private readonly retryTimers: KeyedTimers;
  private readonly resync: PeriodicTask;
  private readonly limiter: Semaphore;
  private readonly reportedOrphans = new Set<string>();
  private running = false;

  constructor(private readonly o: ReconcilerOptions) {
    this.limiter = new Semaphore(o.concurrency ?? 8);
    this.retryTimers = new KeyedTimers(o.clock);
    this.resync = new PeriodicTask(o.clock, o.resyncIntervalMs, () => this.resyncAll(),
      (err) => o.logger.error(`resync failed: ${describeError(err)}`));
  }

  start(): void {
    this.running = true;
    this.resync.start();
  }

  stop(): void {
    this.running = false;
    this.resync.stop();
    this.retryTimers.cancelAll();
  }

  /** A record changed or a domain changed state: look at this machine soon. */
  kick(name: string): Promise<void> {
    if (!this.running || this.queued.has(name)) return Promise.resolve();
    this.queued.add(name);
    return this.o.machineLock.run(name, () =>
      this.limiter.run(async () => {
        this.queued.delete(name);
        await this.reconcile(name);
      }),
    );
  }

  /** Every machine, as after start-up or a reconnect. */
  resyncAll(): Promise<void> {
    return Promise.all(this.o.records.list().map((r) => this.kick(r.name))).then(() => undefined);
  }

  /** Not awaited by the observer: a slow domain start must not delay the next poll. */
  onSnapshot(snapshot: DomainSnapshot, changed: ReadonlySet<string>): void {
    for (const domainName of changed) {
      const name = machineNameFromDomain(domainName);
      if (name && this.o.records.get(name)) void this.kick(name);
    }
    void this.reportOrphans(snapshot);
  }

  private async reconcile(name: string): Promise<void> {
    const record = this.o.records.get(name);
    if (!record || isShuttingDown(record)) return;
    const observer = this.o.observer();
    if (!observer.isConnected) return;
    this.retryTimers.cancel(name);
    try {
      await this.converge(record, observer);
      if (this.backoff.failureCount(name) > 0) this.o.logger.info(`${name}: reconciled after earlier failures`);
      this.backoff.succeed(name);
    } catch (err) {
      await this.fail(name, err);
    }
  }

  private async converge(record: MachineRecord, observer: DomainObserver): Promise<void> {
    const name = record.name;
    let domain = observer.domain(record.domainName);
    if (!domain) {
      await this.o.provisioner.define(record);
      await this.o.records.update(name, (r) => {
        r.status.domainDefined = true;
      });
      domain = { name: record.domainName, uuid: record.uuid, state: 'shutoff' };
    }
    const active = isDomainActive(domain.state);
    if (record.spec.power === 'on' && !active) {
      await this.o.hypervisor.startDomain(record.domainName);
      this.o.records.event(name, 'normal', 'Started', `domain ${record.domainName} started`);
      await this.setState(name, 'running');
    } else if (record.spec.power === 'on') {
      await this.setState(name, 'running');
    } else if (active) {
      // Started behind our back while its power is off: shut it down gracefully.
      await this.o.requestPowerOff(name);
    } else {
      await this.setState(name, 'stopped');
    }
  }

  private async setState(name: string, state: MachineState): Promise<void> {
    await this.o.records.update(name, (r) => {
      if (isShuttingDown(r)) return;
      r.status.state = state;
      r.status.message = '';
    });
  }

  private async fail(name: string, err: unknown): Promise<void> {
    const delay = this.backoff.fail(name);
    const message = describeError(err);
    const first = this.backoff.failureCount(name) === 1;
    if (first) this.o.records.event(name, 'warning', 'ReconcileFailed', `${message} (retrying with backoff)`);
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

  private async reportOrphans(snapshot: DomainSnapshot): Promise<void> {
    for (const domainName of snapshot.keys()) {
      const name = machineNameFromDomain(domainName);
      if (name && this.o.records.get(name)) continue;
      if (this.reportedOrphans.has(domainName)) continue;
      this.reportedOrphans.add(domainName);
      const xml = await this.o.hypervisor.domainXml(domainName).catch(() => undefined);
      if (xml !== undefined && this.o.provisioner.isOurs(xml)) {
        this.o.records.event(name ?? domainName, 'warning', 'OrphanDomain',
          `domain ${domainName} carries the vmkeeper mark but has no machine record; left untouched`);
      }
    }
  }
}
