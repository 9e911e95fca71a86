#!/usr/bin/env node
// vmkeeperd: the process around the agent (daemon.ts builds it). Owns the bus connection, signals and sd_notify, and turns failures into exit codes.
import { AGENT_VERSION } from './agent.js';
import { ConfigError } from './config/errors.js';
import { USAGE } from './config/flags.js';
import { loadConfig } from './config/load-config.js';
import { startDaemon, type RunningDaemon } from './daemon.js';
import { describeError } from './machine/errors.js';
import { createLogger } from './logging/winston-logger.js';
import { onBusLost } from './dbus/bus-address.js';
import { BUS_NAME } from './dbus/dbus-service.js';
import { HostShutdownHandler, type StopCause } from './hostshutdown/host-shutdown-handler.js';
import { SystemBusHostPlatform } from './hostshutdown/host-platform.js';
import { systemClock } from './lifecycle/clock.js';
import { busSelfCall } from './systemd/bus-probe.js';
import { createNotifier } from './systemd/notifier.js';
import { applyRuntimeKeys, diffConfig, levelGate } from './systemd/reload.js';
import { StatusReporter } from './systemd/status.js';
import { installTestWedge } from './systemd/test-wedge.js';
import { Watchdog, healthThresholds } from './systemd/watchdog.js';

const EXIT_CONFIG = 78; // EX_CONFIG: systemd shows it, and Restart=on-failure does not loop on it
const EXIT_FAILURE = 1;

/** Started by systemd (a unit sets INVOCATION_ID; Type=notify sets NOTIFY_SOCKET). */
const underSystemd = (env: NodeJS.ProcessEnv) => Boolean(env.NOTIFY_SOCKET || env.INVOCATION_ID);

async function main(): Promise<number> {
  let loaded;
  try {
    loaded = loadConfig({ argv: process.argv.slice(2), env: process.env });
  } catch (err) {
    process.stderr.write(`vmkeeperd: ${describeError(err)}\n`);
    return err instanceof ConfigError ? EXIT_CONFIG : EXIT_FAILURE;
  }
  if (loaded.help) return void process.stdout.write(`${USAGE}\n`), 0;
  if (loaded.version) return void process.stdout.write(`vmkeeperd ${AGENT_VERSION}\n`), 0;
  const { config } = loaded;
  // `live` is the config in force: reload (SIGHUP) changes its runtime keys in place.
  const live = structuredClone(config);
  const sink = createLogger({ level: 'debug', format: config.log.format });
  const logger = levelGate(sink, () => live.log.level);
  const notifier = createNotifier(process.env, (err) => logger.warn(`sd_notify failed: ${describeError(err)}`));
  installTestWedge(process.env, logger);
  logger.info(`vmkeeperd ${AGENT_VERSION} starting`, { config: loaded.configFileFound ? loaded.configPath : 'built-in defaults', bus: config.bus, libvirt: config.libvirt.uri, stateDir: config.stateDir });

  let daemon: RunningDaemon;
  try {
    daemon = await startDaemon(live, logger);
  } catch (err) {
    logger.error(`start-up failed: ${describeError(err)}`);
    await sink.close();
    return EXIT_FAILURE;
  }
  const { agent } = daemon;
  const clock = systemClock;
  const status = new StatusReporter({ api: agent.service, notifier, clock, lastSweepAt: () => agent.sweeper.lastSweepAt });
  const callTimeoutMs = live.libvirt.callTimeoutSec * 1000; // also bounds each destroy at host shutdown
  const hostShutdown = new HostShutdownHandler({
    // logind and systemd are asked only when systemd runs us (not in development or tests).
    platform: underSystemd(process.env) ? new SystemBusHostPlatform({ logger }) : undefined,
    hypervisor: agent.hypervisor,
    target: agent,
    clock,
    logger,
    settings: () => ({ ...live.hostShutdown, retryIntervalMs: live.machines.shutdownRetryIntervalSec * 1000 }),
    destroyTimeoutMs: callTimeoutMs,
    // systemd waits for the destroys at the deadline, plus some slack for our own stop.
    onProgress: (p) => status.hostShutdownProgress(p, callTimeoutMs + 15_000),
  });
  await hostShutdown.start();
  const watchdog = new Watchdog({
    clock,
    notifier,
    logger,
    thresholds: healthThresholds({
      watchdogMs: notifier.watchdogIntervalMs,
      sweepIntervalMs: live.machines.sweepIntervalSec * 1000,
      callTimeoutMs,
    }),
    lastSweepAt: () => agent.sweeper.lastSweepAt,
    busProbe: busSelfCall(daemon.bus, BUS_NAME),
  });

  const info = agent.service.info();
  notifier.ready(status.current());
  status.start();
  watchdog.start();
  logger.info(`ready: ${info.state}, ${agent.service.list().length} machines, libvirt ${info.libvirtConnected ? 'connected' : 'unavailable'}`);

  const reload = () => {
    notifier.reloading('reloading configuration');
    try {
      const next = loadConfig({ argv: process.argv.slice(2), env: process.env }).config;
      const diff = diffConfig(live, next);
      applyRuntimeKeys(live, next);
      agent.service.updateInfo({ hostShutdownTimeoutSec: live.hostShutdown.timeoutSec });
      if (diff.applied.length) logger.info(`configuration reloaded: applied ${diff.applied.join(', ')}`);
      else logger.info('configuration reloaded: no runtime setting changed');
      if (diff.needRestart.length) logger.warn(`changed but only applied by a restart (systemctl restart vmkeeperd leaves guests running): ${diff.needRestart.join(', ')}`);
    } catch (err) {
      logger.error(`configuration reload rejected, nothing changed: ${describeError(err)}`);
    } finally {
      notifier.ready(status.current());
    }
  };
  process.on('SIGHUP', reload);

  return new Promise<number>((resolve) => {
    let stopping = false;
    const stop = (signal: string, cause: StopCause = 'signal', exitCode = 0) => {
      if (stopping) return;
      stopping = true;
      logger.info(`${signal} received: stopping`);
      watchdog.setStopping();
      notifier.stopping('stopping');
      const finish = async () => {
        const outcome = await hostShutdown.onStop(cause);
        status.stop();
        await daemon.stop();
        hostShutdown.close();
        watchdog.stop();
        const r = outcome.report;
        logger.info(r
          ? `stopped: ${r.cleanly} guests shut down cleanly, ${r.destroyed} destroyed, ${r.leftRunning} left running`
          : 'stopped: guests left running');
      };
      finish().then(
        () => resolve(exitCode),
        (err) => {
          logger.error(`stop failed: ${describeError(err)}`);
          hostShutdown.close();
          resolve(EXIT_FAILURE);
        },
      );
    };
    process.on('SIGTERM', () => stop('SIGTERM'));
    // Without its bus the agent is deaf: exit non-zero so systemd (Restart=on-failure) starts a
    // fresh one that owns the name on the new bus. Guests keep running, as on any restart.
    onBusLost(daemon.bus, (reason) => {
      if (stopping) return;
      logger.error(`lost the D-Bus connection (${reason}); guests left running: exiting so the service manager restarts vmkeeperd`);
      stop('bus connection lost', 'bus-lost', EXIT_FAILURE);
    });
    process.on('SIGINT', () => stop('SIGINT'));
  }).finally(() => sink.close());
}

const code = await main();
process.exit(code);
