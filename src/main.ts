#!/usr/bin/env node
// vmkeeperd: the process around the daemon (daemon.ts builds it). Reads the config, builds the
// logger, wires signals and the bus loss to the daemon, and turns the outcome into an exit code.
import { AGENT_VERSION } from './agent.js';
import { ConfigError } from './config/errors.js';
import { USAGE } from './config/flags.js';
import { loadConfig } from './config/load-config.js';
import { Daemon, type StopReason } from './daemon.js';
import { describeError } from './machine/errors.js';
import { createLogger } from './logging/winston-logger.js';
import { levelGate } from './systemd/reload.js';
import { nativeJournal } from './logging/journal/native-journal.js';
import { cacheDbusSignatures } from './dbus/signature-cache.js';

const EXIT_CONFIG = 78; // EX_CONFIG: systemd shows it, and Restart=on-failure does not loop on it
const EXIT_FAILURE = 1;

async function main(): Promise<number> {
  cacheDbusSignatures();
  const load = () => loadConfig({ argv: process.argv.slice(2), env: process.env });
  let loaded;
  try {
    loaded = load();
  } catch (err) {
    process.stderr.write(`vmkeeperd: ${describeError(err)}\n`);
    return err instanceof ConfigError ? EXIT_CONFIG : EXIT_FAILURE;
  }
  if (loaded.help) return void process.stdout.write(`${USAGE}\n`), 0;
  if (loaded.version) return void process.stdout.write(`vmkeeperd ${AGENT_VERSION}\n`), 0;
  const { config } = loaded;
  // `live` is the config in force: reload (SIGHUP) changes its runtime keys in place.
  const live = structuredClone(config);
  const native = config.log.format === 'journal' ? nativeJournal(config.log.journalTransport, process.env) : {};
  const sink = createLogger({ level: 'debug', format: config.log.format, ...(native.journal ? { journal: native.journal } : {}) });
  const logger = levelGate(sink, () => live.log.level);
  logger.info(`vmkeeperd ${AGENT_VERSION} starting`, { config: loaded.configFileFound ? loaded.configPath : 'built-in defaults', bus: config.bus, libvirt: config.libvirt.uri, stateDir: config.stateDir });
  if (native.notUsed) logger.warn(`journal: structured fields off, writing lines to stderr (${native.notUsed})`);

  // The first stop request wins; it also aborts a start still under way.
  const stopRequest = new AbortController();
  let resolveStop!: (reason: StopReason) => void;
  const stopRequested = new Promise<StopReason>((resolve) => (resolveStop = resolve));
  const requestStop = (reason: StopReason) => {
    if (stopRequest.signal.aborted) return;
    stopRequest.abort();
    resolveStop(reason);
  };
  process.on('SIGTERM', () => requestStop({ why: 'SIGTERM received', cause: 'signal' }));
  process.on('SIGINT', () => requestStop({ why: 'SIGINT received', cause: 'signal' }));

  try {
    let daemon: Daemon;
    try {
      daemon = new Daemon({
        config: live,
        logger,
        env: process.env,
        // Without its bus the agent is deaf: exit non-zero so systemd (Restart=on-failure) starts a
        // fresh one that owns the name on the new bus. Guests keep running, as on any restart.
        onBusLost: (reason) => {
          if (stopRequest.signal.aborted) return;
          logger.error(`lost the D-Bus connection (${reason}); guests left running: exiting so the service manager restarts vmkeeperd`);
          requestStop({ why: 'bus connection lost', cause: 'bus-lost' });
        },
      });
      process.on('SIGHUP', () => daemon.reload(() => load().config));
      // false: a stop came first; stop() below stops what had started.
      await daemon.start(stopRequest.signal);
    } catch (err) {
      logger.error(`start-up failed: ${describeError(err)}`);
      return EXIT_FAILURE;
    }
    const reason = await stopRequested;
    const clean = await daemon.stop(reason);
    return clean && reason.cause !== 'bus-lost' ? 0 : EXIT_FAILURE;
  } finally {
    await sink.close();
  }
}

const code = await main();
process.exit(code);
