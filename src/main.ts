#!/usr/bin/env node
// vmkeeperd: the process around the agent (daemon.ts builds it). Owns the bus connection, signals and sd_notify, and turns failures into exit codes.
import { AGENT_VERSION } from './agent.js';
import { ConfigError } from './config/errors.js';
import { loadConfig } from './config/load-config.js';
import { startDaemon, type RunningDaemon } from './daemon.js';
import { describeError } from './machine/errors.js';
import { createLogger } from './logging/winston-logger.js';
import { createNotifier } from './systemd/notifier.js';

const USAGE = `Usage: vmkeeperd [--config FILE] [--bus system|session|ADDRESS] [--libvirt-uri URI]
                 [--state-dir DIR] [--image-dir DIR]... [--log-level LEVEL] [--log-format journal|text|json]
Manages libvirt virtual machines and exposes them on D-Bus as org.vmkeeper1.
See vmkeeperd(8) and docs/configuration.md.`;

const EXIT_CONFIG = 78; // EX_CONFIG: systemd shows it, and Restart=on-failure does not loop on it
const EXIT_FAILURE = 1;

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
  const logger = createLogger({ level: config.log.level, format: config.log.format });
  const notifier = createNotifier();
  logger.info(`vmkeeperd ${AGENT_VERSION} starting`, { config: loaded.configFileFound ? loaded.configPath : 'built-in defaults', bus: config.bus, libvirt: config.libvirt.uri, stateDir: config.stateDir });

  let daemon: RunningDaemon;
  try {
    daemon = await startDaemon(config, logger);
  } catch (err) {
    logger.error(`start-up failed: ${describeError(err)}`);
    await logger.close();
    return EXIT_FAILURE;
  }
  const info = daemon.agent.service.info();
  notifier.ready(`${info.state}: ${daemon.agent.service.list().length} machines`);
  logger.info(`ready: ${info.state}, ${daemon.agent.service.list().length} machines, libvirt ${info.libvirtConnected ? 'connected' : 'unavailable'}`);

  return new Promise<number>((resolve) => {
    let stopping = false;
    const stop = (signal: string) => {
      if (stopping) return;
      stopping = true;
      logger.info(`${signal} received: stopping (guests are left running)`);
      notifier.stopping('stopping');
      daemon.stop().then(
        () => resolve(0),
        (err) => {
          logger.error(`stop failed: ${describeError(err)}`);
          resolve(EXIT_FAILURE);
        },
      );
    };
    process.on('SIGTERM', () => stop('SIGTERM'));
    process.on('SIGINT', () => stop('SIGINT'));
  }).finally(() => logger.close());
}

const code = await main();
process.exit(code);
