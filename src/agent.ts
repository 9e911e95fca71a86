import type { Config } from './config/config.js';
import { VERSION } from './version.js';
import { specLimitsFrom } from './config/config.js';
import type { Clock } from './lifecycle/clock.js';
import { KeyedLock } from './lifecycle/keyed-lock.js';
import { withTimeout } from './lifecycle/with-timeout.js';
import { TypedEmitter } from './lifecycle/emitter.js';
import type { Logger } from './logging/logger.js';
import { describeError } from './machine/errors.js';
import { recordsDir } from './machine/paths.js';
import type { DiskProvisioner, Hypervisor } from './hypervisor/port.js';
import type { ImageChecker } from './hypervisor/image-guard.js';
import type { MachineStore } from './store/port.js';
import type { MachineApiEvents } from './service/api.js';
import { EventLog } from './service/event-log.js';
import { EventJournal } from './events/event-journal.js';
import type { SegmentFiles } from './events/segment-files.js';
import { MachineRecords } from './service/machine-records.js';
import { MachineService } from './service/machine-service.js';
import { DomainObserver } from './domains/domain-observer.js';
import { DomainProvisioner } from './domains/domain-provisioner.js';
import { DomainOwnership } from './domains/domain-ownership.js';
import { SavedStates } from './domains/saved-states.js';
import { Reconciler } from './reconciler/reconciler.js';
import { StartGate } from './reconciler/start-gate.js';
import { Sweeper } from './sweeper/sweeper.js';
import { PolicyStopProcedure } from './hostshutdown/policy-stop-procedure.js';
import { ShutdownRecords } from './hostshutdown/shutdown-records.js';

export const AGENT_VERSION = VERSION;

/** What the composition root hands the agent: every outside part is passed in. */
export interface AgentParts {
  config: Config;
  clock: Clock;
  logger: Logger;
  store: MachineStore;
  hypervisor: Hypervisor;
  disks: DiskProvisioner;
  /** Checks image paths on disk (symlinks, backing chains); without it only their text is checked. */
  images?: ImageChecker;
  /** Where the event journal persists; without it events live in memory only. */
  eventFiles?: SegmentFiles;
  /** The persisted stop runs; without it they live in memory only. */
  shutdownRecords?: ShutdownRecords;
  /** Saves in flight at once during a stop run: below the hypervisor's call slots (default 1). */
  maxConcurrentSaves?: number;
}

/** The store's own settling (3 s) and its last file writes, with room to spare. */
const CLOSE_STORE_TIMEOUT_MS = 10_000;
/**
 * How long a stop lets machine actions under way finish: a healthy define or start answers in
 * well under this; a hung libvirtd would not answer within any wait a stop can afford.
 */
export const IN_FLIGHT_WAIT_MS = 10_000;

/** The agent's core, wired: everything except the process (signals, bus, sd_notify) around it. */
export class Agent {
  readonly service: MachineService;
  readonly observer: DomainObserver;
  readonly reconciler: Reconciler;
  readonly sweeper: Sweeper;
  readonly records: MachineRecords;
  readonly journal: EventJournal;
  /** Which domains under our names are really ours; shared by every part that acts on domains. */
  readonly ownership: DomainOwnership;
  /** Held while the host is drained: the reconciler starts no guest (reconciler/start-gate.ts). */
  readonly startGate = new StartGate();
  /** Every stop and drain run, persisted (ShutdownRecordReader for D-Bus and vmkeeperctl). */
  readonly shutdownRecords: ShutdownRecords;
  /** Stops every guest by policy and priority: host shutdown, service stop, drain; `events` tells how a run goes. */
  readonly stopProcedure: PolicyStopProcedure;
  private readonly logger: Logger;
  /** One hypervisor action per machine at a time; every reconcile pass and sweep step runs under it. */
  private readonly machineLock = new KeyedLock();

  constructor(private readonly parts: AgentParts) {
    const { config, clock, logger, store, hypervisor, disks } = parts;
    this.logger = logger;
    const emitter = new TypedEmitter<MachineApiEvents>((err) => logger.error(`event listener failed: ${describeError(err)}`));
    this.journal = new EventJournal({
      clock,
      logger,
      retention: { maxCount: config.events.maxCount, maxAgeMs: config.events.maxAgeSec * 1000 },
      files: parts.eventFiles,
      onDurable: (batch) => batch.forEach((e) => emitter.emit('eventJournaled', e)),
    });
    // A store with a journal carries each API call's event in its record's frame: one sync per call.
    store.carryAttachmentsOf?.(this.journal);
    const events = new EventLog(clock, logger, (e) => emitter.emit('event', e), this.journal);
    this.records = new MachineRecords(store, events, emitter);
    const provisioner = new DomainProvisioner(hypervisor, disks, config.stateDir, parts.images);
    this.ownership = new DomainOwnership(hypervisor);
    const m = config.machines;
    this.service = new MachineService({
      records: this.records,
      events,
      clock,
      limits: specLimitsFrom(config),
      images: parts.images,
      info: {
        version: AGENT_VERSION,
        libvirtUri: config.libvirt.uri,
        defaultGracePeriodSec: m.defaultGracePeriodSec,
        sweepIntervalSec: m.sweepIntervalSec,
        shutdownRetryIntervalSec: m.shutdownRetryIntervalSec,
        hostShutdownTimeoutSec: config.hostShutdown.timeoutSec,
      },
      kick: (name) => {
        void this.reconciler.kick(name);
        void this.sweeper.kick(name);
      },
    });
    // What the reconciler and the sweeper share; the machine lock keeps them off one domain at once.
    const loopParts = { records: this.records, hypervisor, observer: () => this.observer, provisioner, clock, logger, machineLock: this.machineLock };
    this.reconciler = new Reconciler({
      ...loopParts,
      ownership: this.ownership,
      resyncIntervalMs: m.resyncIntervalSec * 1000,
      defaultGracePeriodSec: m.defaultGracePeriodSec,
      handOff: (name) => void this.sweeper.kick(name),
      startGate: this.startGate,
      savedStates: new SavedStates(disks, config.stateDir),
      startOrder: { parallelism: config.restore.parallelism, delayMs: config.restore.delaySec * 1000 },
    });
    this.sweeper = new Sweeper({
      ...loopParts,
      ownership: this.ownership,
      sweepIntervalMs: m.sweepIntervalSec * 1000,
      shutdownRetryIntervalMs: m.shutdownRetryIntervalSec * 1000,
    });
    this.shutdownRecords = parts.shutdownRecords ?? new ShutdownRecords({ logger });
    this.stopProcedure = new PolicyStopProcedure({
      hypervisor,
      clock,
      logger,
      machines: this.records,
      records: this.shutdownRecords,
      stateDir: config.stateDir,
      // Read at each run: a reload of these keys applies to the next one.
      settings: () => ({
        timeoutSec: config.hostShutdown.timeoutSec,
        parallelism: config.hostShutdown.parallelism,
        groups: config.hostShutdown.groups,
        retryIntervalMs: config.machines.shutdownRetryIntervalSec * 1000,
      }),
      maxConcurrentSaves: parts.maxConcurrentSaves ?? 1,
      destroyTimeoutMs: config.libvirt.callTimeoutSec * 1000,
    });
    // libvirt's domain events where there are any (else a poll of which domains run); every domain
    // is listed at each resync.
    this.observer = new DomainObserver({
      hypervisor,
      clock,
      logger,
      pollIntervalMs: m.pollIntervalMs,
      fullListIntervalMs: m.resyncIntervalSec * 1000,
      useEvents: config.libvirt.domainEvents === 'auto',
      listener: {
        onSnapshot: (snapshot, changed) => {
          this.reconciler.onSnapshot(snapshot, changed);
          this.sweeper.onSnapshot(snapshot, changed);
        },
        onConnectionChange: (connected) => {
          this.service.setLibvirtConnected(connected);
          if (connected) {
            void this.reconciler.resyncAll();
            void this.sweeper.sweepOnce();
          }
        },
      },
    });
  }

  /** Loads the records and starts watching libvirt. A dead libvirtd leaves the agent degraded, not down. */
  async start(): Promise<void> {
    await this.load();
    await this.watch();
  }

  /** Loads the records: from here on reads are answered, before libvirt is even asked. */
  async load(): Promise<void> {
    // The store logs each quarantined file itself, once, with its reason.
    await this.journal.open();
    const loaded = await this.parts.store.load();
    const unchanged = loaded.fromSnapshot ? ` (${loaded.fromSnapshot} unchanged since the last clean stop, taken from its snapshot)` : '';
    this.logger.info(`loaded ${loaded.records} machine records from ${recordsDir(this.parts.config.stateDir)}${unchanged}`);
    await this.shutdownRecords.load();
  }

  /**
   * Closes the record store, once nothing can write any more (the bus is gone, the loops are
   * stopped): its checkpoint makes the files current, and the snapshot the next start reads first
   * is written. Then the event journal: the checkpoint first secures the events its frames carry.
   */
  async closeStore(): Promise<void> {
    const store = this.parts.store;
    try {
      // A hung state file system must not hold the stop: the journal already holds every change.
      if (store.close) {
        await withTimeout(this.parts.clock, CLOSE_STORE_TIMEOUT_MS, () => store.close!(),
          () => new Error(`closing the record store took over ${CLOSE_STORE_TIMEOUT_MS / 1000} s (is the state file system hung?); the record journal holds every change`));
      }
    } finally {
      await this.journal.close().catch((err) => this.logger.warn(`closing the event journal: ${describeError(err)}`));
    }
  }

  /** Starts the loops and the first poll; the reconcile that poll triggers goes on in the background. */
  async watch(): Promise<void> {
    this.reconciler.start();
    this.sweeper.start();
    await this.observer.start();
    this.service.setAgentState(this.observer.isConnected ? 'running' : 'degraded');
  }

  /** The hypervisor the agent drives (the host-shutdown coordinator uses the same connection). */
  get hypervisor(): Hypervisor {
    return this.parts.hypervisor;
  }

  /**
   * A host shutdown (or a stop that shuts the guests down) begins: the reconciler stops, so guests
   * that go off are not started again. No record changes: power stays "on", and after the reboot
   * the reconciler starts them. New machines are refused (ShuttingDown) from here on.
   */
  enterShutdown(state: 'host-shutdown' | 'stopping'): void {
    this.service.setAgentState(state);
    this.reconciler.stop();
  }

  /** The host shutdown was called off (logind PrepareForShutdown false): reconcile again (start is idempotent). */
  leaveShutdown(): void {
    this.service.setAgentState(this.observer.isConnected ? 'running' : 'degraded');
    this.reconciler.start();
    void this.reconciler.resyncAll();
  }

  /**
   * Stops the control loops; guests keep running (a restart of the agent must not touch them).
   * Passes already under way may finish first: closing libvirt under a define or a start would
   * fail it, and its machine would be stored as in error for a mere restart. The event journal
   * stays open for closeStore().
   */
  async stop(): Promise<void> {
    this.service.setAgentState('stopping');
    const libvirtConnected = this.observer.isConnected;
    this.sweeper.stop();
    this.reconciler.stop();
    await this.observer.stop();
    if (libvirtConnected) await this.passesInFlight();
    await this.parts.hypervisor.close().catch((err) => this.logger.warn(`closing libvirt: ${describeError(err)}`));
  }

  /** The loops are stopped, so no new pass begins; the ones running get IN_FLIGHT_WAIT_MS to end. */
  private async passesInFlight(): Promise<void> {
    const busy = this.machineLock.busyKeys();
    if (busy.length === 0) return;
    this.logger.info(`waiting for ${busy.length} machine ${busy.length === 1 ? 'action' : 'actions'} under way to finish: ${listed(busy)}`);
    await withTimeout(this.parts.clock, IN_FLIGHT_WAIT_MS, () => this.machineLock.whenIdle(),
      () => new Error(`machine actions still under way after ${IN_FLIGHT_WAIT_MS / 1000} s: ${listed(this.machineLock.busyKeys())}`))
      .catch((err) => this.logger.warn(`${describeError(err)}; closing libvirt under them (the next start reconciles these machines again)`));
  }
}

/** At most 10 names, then how many more: a log line stays readable with 10,000 machines. */
function listed(names: string[]): string {
  const shown = names.slice(0, 10).join(', ');
  return names.length > 10 ? `${shown} and ${names.length - 10} more` : shown;
}
