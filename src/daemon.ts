// The composition root: the one place that builds vmkeeperd's parts, starts them in order and
// stops the started ones in reverse. main.ts only parses the config, logs, and wires signals here.
import type { MessageBus } from 'dbus-next';
import { Agent, AGENT_VERSION, IN_FLIGHT_WAIT_MS } from './agent.js';
import { type Config, specLimitsFrom } from './config/config.js';
import { connectBus, onBusLost } from './dbus/bus-address.js';
import { buildAuthorizer } from './dbus/authorization/build-authorizer.js';
import { BUS_NAME, DBusService } from './dbus/dbus-service.js';
import { DrainController } from './drain/drain-controller.js';
import { DrainStateFile } from './drain/drain-state-file.js';
import { hostApi } from './drain/host-api.js';
import { SystemBusHostPlatform } from './hostshutdown/host-platform.js';
import { HostShutdownHandler, type StopCause } from './hostshutdown/host-shutdown-handler.js';
import { summarize } from './hostshutdown/policy-stop-procedure.js';
import { ShutdownRecords } from './hostshutdown/shutdown-records.js';
import type { ShutdownRecord } from './hostshutdown/stop-procedure.js';
import { QemuImgDiskProvisioner } from './hypervisor/disk-provisioner.js';
import { ImageGuard, qemuImgInspector } from './hypervisor/image-guard.js';
import { LibvirtHypervisor } from './hypervisor/libvirt/libvirt-hypervisor.js';
import { QemuImg } from './hypervisor/qemu-img.js';
import { systemClock } from './lifecycle/clock.js';
import { PartSequence } from './lifecycle/part-sequence.js';
import type { Logger } from './logging/logger.js';
import { describeError } from './machine/errors.js';
import { drainStateFile, eventsDir, recordJournalFile, recordsDir, recordsSnapshotFile, shutdownRecordsDir } from './machine/paths.js';
import { SegmentFiles } from './events/segment-files.js';
import { FileMachineStore } from './store/file-store.js';
import { StoredRecordValidator } from './store/record-validation.js';
import { busSelfCall } from './systemd/bus-probe.js';
import { createNotifier, type Notifier } from './systemd/notifier.js';
import { applyRuntimeKeys, diffConfig } from './systemd/reload.js';
import { StatusReporter } from './systemd/status.js';
import { Watchdog, healthThresholds } from './systemd/watchdog.js';

export interface DaemonOptions {
  /** The config in force: a reload changes its runtime keys in place (the logger reads log.level). */
  config: Config;
  logger: Logger;
  env: NodeJS.ProcessEnv;
  /** The service bus connection ended while running (never called for our own disconnect). */
  onBusLost(reason: string): void;
}

export interface StopReason {
  /** Opens the stopping line, e.g. "SIGTERM received". */
  why: string;
  cause: StopCause;
}

/** Started by systemd (a unit sets INVOCATION_ID; Type=notify sets NOTIFY_SOCKET). */
const underSystemd = (env: NodeJS.ProcessEnv) => Boolean(env.NOTIFY_SOCKET || env.INVOCATION_ID);

export class Daemon {
  private readonly clock = systemClock;
  private readonly logger: Logger;
  private readonly notifier: Notifier;
  private readonly agent: Agent;
  private readonly status: StatusReporter;
  private readonly hostShutdown: HostShutdownHandler;
  private readonly drain: DrainController;
  private readonly parts: PartSequence;
  private bus: MessageBus | undefined;
  private disconnecting = false;
  private dbus: DBusService | undefined;
  private watchdog: Watchdog | undefined;
  private ready = false;
  private stopping: Promise<boolean> | undefined;
  private stopCause: StopCause = 'signal';
  /** What the stop did to the guests; "untouched" until the host-shutdown part has stopped. */
  private guests: ShutdownRecord | 'untouched' | 'unknown' = 'untouched';

  constructor(private readonly o: DaemonOptions) {
    const { config, logger, env } = o;
    const clock = this.clock;
    this.logger = logger;
    this.notifier = createNotifier(env, (err) => logger.warn(`sd_notify failed: ${describeError(err)}`));
    // Inspections are answered while a caller waits on the bus: a short deadline, unlike disk creation.
    const inspector = new QemuImg({ timeoutMs: 10_000, logger });
    const callTimeoutMs = config.libvirt.callTimeoutSec * 1000; // also bounds each destroy at host shutdown
    const hypervisor = new LibvirtHypervisor({ uri: config.libvirt.uri, callTimeoutMs, logger, clock });
    // What systemd and logind must allow past hostShutdown.timeoutSec: the destroys at the end, and
    // our own stop (machine actions under way finishing, then the rest).
    const stopAllowanceMs = callTimeoutMs + IN_FLIGHT_WAIT_MS + 15_000;
    const limits = specLimitsFrom(config);
    // The snapshot's records were checked by this release under these limits: another release or
    // other limits check every file again.
    const snapshot = { file: recordsSnapshotFile(config.stateDir), key: `${AGENT_VERSION} ${JSON.stringify(limits)}` };
    this.agent = new Agent({
      config,
      clock,
      logger,
      store: new FileMachineStore({ dir: recordsDir(config.stateDir), journalFile: recordJournalFile(config.stateDir), logger, clock, validator: new StoredRecordValidator(limits), snapshot }),
      hypervisor,
      disks: new QemuImgDiskProvisioner({ logger }),
      eventFiles: new SegmentFiles(eventsDir(config.stateDir), logger),
      images: new ImageGuard({ imageDirectories: config.imageDirectories, inspect: qemuImgInspector(inspector) }),
      shutdownRecords: new ShutdownRecords({ dir: shutdownRecordsDir(config.stateDir), logger }),
      // One libvirt call slot always stays free for the listings and the destroys at a budget end.
      maxConcurrentSaves: Math.max(1, hypervisor.callSlots - 1),
    });
    const agent = this.agent;
    this.drain = new DrainController({
      file: new DrainStateFile(drainStateFile(config.stateDir)),
      gate: agent.startGate,
      stopProcedure: agent.stopProcedure,
      events: { record: (type, reason, message, actor) => agent.records.event('', type, reason, message, actor), flushed: () => agent.journal.flushed() },
      agent: agent.service,
      clock,
      logger,
    });
    this.status = new StatusReporter({ api: agent.service, notifier: this.notifier, clock, lastSweepAt: () => agent.sweeper.lastSweepAt });
    agent.stopProcedure.events.on('progress', (p) => this.status.stopProgress(p, stopAllowanceMs));
    // After a drain the host stays up: its progress line goes. A stop's stays until the exit.
    agent.stopProcedure.events.on('ended', (r) => r.kind === 'drain' && this.status.setOverride(undefined));
    this.hostShutdown = new HostShutdownHandler({
      // logind and systemd are asked only when systemd runs us (not in development or tests).
      platform: underSystemd(env) ? new SystemBusHostPlatform({ logger }) : undefined,
      procedure: agent.stopProcedure,
      target: agent,
      clock,
      logger,
      settings: () => config.hostShutdown,
      stopAllowanceMs,
    });
    // Each part needs the ones before it; the host-shutdown part stops first, while the API,
    // STATUS= and the watchdog still serve the guest shutdowns it may run.
    this.parts = new PartSequence([
      // Reads are served from the loaded records while libvirt is first polled and reconciled.
      // A persisted drain holds the start gate before the reconciler's first pass.
      { name: 'machine records', start: async () => {
        await agent.load();
        await this.drain.restore();
      }, stop: () => agent.closeStore() },
      { name: 'D-Bus connection', start: () => this.connect(), stop: () => this.disconnect() },
      { name: 'D-Bus service', start: () => this.dbus!.start(), stop: () => this.dbus!.stop() },
      { name: 'agent', start: () => agent.watch(), stop: async () => {
        // A drain's run ends before libvirt closes; the drain itself stays persisted.
        await this.drain.stop();
        await agent.stop();
      } },
      { name: 'status', start: () => this.status.start(), stop: () => this.status.stop() },
      { name: 'watchdog', start: () => this.startWatchdog(), stop: () => this.watchdog?.stop() },
      { name: 'host shutdown', start: () => this.hostShutdown.start(), stop: () => this.stopHostShutdown() },
      { name: 'ready', start: () => this.announceReady() },
    ], logger);
  }

  /**
   * Starts every part, checking the signal between them: false when it aborted first (stop()
   * then stops what started). A part that fails undoes the started ones and throws.
   */
  async start(signal: AbortSignal): Promise<boolean> {
    try {
      return await this.parts.start(signal);
    } catch (err) {
      await this.parts.stop();
      throw err;
    }
  }

  /** Stops each started part in reverse order, on its own; true when every one stopped cleanly. */
  stop(reason: StopReason): Promise<boolean> {
    this.stopping ??= this.stopParts(reason);
    return this.stopping;
  }

  /** SIGHUP: applies the runtime keys of a fresh config; a config that fails to load changes nothing. */
  reload(load: () => Config): void {
    if (!this.ready) {
      this.logger.warn('configuration reload ignored: vmkeeperd is not running (starting or stopping)');
      return;
    }
    const live = this.o.config;
    this.notifier.reloading('reloading configuration');
    try {
      const next = load();
      const diff = diffConfig(live, next);
      applyRuntimeKeys(live, next);
      this.agent.service.updateInfo({ hostShutdownTimeoutSec: live.hostShutdown.timeoutSec });
      if (diff.applied.length) this.logger.info(`configuration reloaded: applied ${diff.applied.join(', ')}`);
      else this.logger.info('configuration reloaded: no runtime setting changed');
      if (diff.needRestart.length) this.logger.warn(`changed but only applied by a restart (systemctl restart vmkeeperd leaves guests running): ${diff.needRestart.join(', ')}`);
    } catch (err) {
      this.logger.error(`configuration reload rejected, nothing changed: ${describeError(err)}`);
    } finally {
      this.notifier.ready(this.status.current());
    }
  }

  private async connect(): Promise<void> {
    const bus = await connectBus(this.o.config.bus);
    this.bus = bus;
    const authorizer = buildAuthorizer(this.o.config.authorization, bus, this.clock, this.logger);
    this.dbus = new DBusService({ bus, api: this.agent.service, logger: this.logger, authorizer, host: hostApi(this.drain, this.agent.shutdownRecords) });
    onBusLost(bus, (reason) => {
      if (!this.stopping && !this.disconnecting) this.o.onBusLost(reason);
    });
  }

  /** Our own disconnect (at stop, or undoing a failed start) ends the connection too: no loss. */
  private disconnect(): void {
    this.disconnecting = true;
    this.bus?.disconnect();
  }

  private startWatchdog(): void {
    const { config } = this.o;
    this.watchdog = new Watchdog({
      clock: this.clock,
      notifier: this.notifier,
      logger: this.logger,
      thresholds: healthThresholds({
        watchdogMs: this.notifier.watchdogIntervalMs,
        sweepIntervalMs: config.machines.sweepIntervalSec * 1000,
        callTimeoutMs: config.libvirt.callTimeoutSec * 1000,
      }),
      lastSweepAt: () => this.agent.sweeper.lastSweepAt,
      busProbe: busSelfCall(this.bus!, BUS_NAME),
    });
    this.watchdog.start();
  }

  private announceReady(): void {
    const service = this.agent.service;
    const info = service.info();
    this.notifier.ready(this.status.current());
    this.ready = true;
    this.logger.info(`ready: ${info.state}, ${service.list().length} machines, libvirt ${info.libvirtConnected ? 'connected' : 'unavailable'}`);
  }

  private async stopHostShutdown(): Promise<void> {
    this.guests = 'unknown';
    try {
      const outcome = await this.hostShutdown.onStop(this.stopCause);
      this.guests = outcome.record ?? 'untouched';
    } finally {
      this.hostShutdown.close();
    }
  }

  private async stopParts(reason: StopReason): Promise<boolean> {
    this.logger.info(`${reason.why}: stopping`);
    this.ready = false;
    this.stopCause = reason.cause;
    this.watchdog?.setStopping();
    this.notifier.stopping('stopping');
    const clean = await this.parts.stop();
    const r = this.guests;
    // A failed host-shutdown step was logged as such: no guess about the guests.
    if (r !== 'unknown') {
      this.logger.info(r === 'untouched'
        ? 'stopped: guests left running'
        : `stopped: ${summarize(r)}`);
    }
    return clean;
  }
}
