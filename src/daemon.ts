// The composition root: the one place that constructs the agent's real parts and wires them.
import { Agent } from './agent.js';
import { type Config, specLimitsFrom } from './config/config.js';
import type { MessageBus } from 'dbus-next';
import { connectBus } from './dbus/bus-address.js';
import { DBusService } from './dbus/dbus-service.js';
import { QemuImgDiskProvisioner } from './hypervisor/disk-provisioner.js';
import { ImageGuard, qemuImgInspector } from './hypervisor/image-guard.js';
import { QemuImg } from './hypervisor/qemu-img.js';
import { LibvirtHypervisor } from './hypervisor/libvirt/libvirt-hypervisor.js';
import { systemClock } from './lifecycle/clock.js';
import { recordsDir } from './machine/paths.js';
import type { Logger } from './logging/logger.js';
import { FileMachineStore } from './store/file-store.js';
import { StoredRecordValidator } from './store/record-validation.js';

export interface RunningDaemon {
  agent: Agent;
  dbus: DBusService;
  /** The agent's bus connection (the watchdog calls itself over it). */
  bus: MessageBus;
  stop(): Promise<void>;
}

/** Builds and starts everything for a config; used by main() and by in-process integration tests. */
export async function startDaemon(config: Config, logger: Logger): Promise<RunningDaemon> {
  const clock = systemClock;
  // Inspections are answered while a caller waits on the bus: a short deadline, unlike disk creation.
  const inspector = new QemuImg({ timeoutMs: 10_000, logger });
  const agent = new Agent({
    config,
    clock,
    logger,
    store: new FileMachineStore({ dir: recordsDir(config.stateDir), logger, validator: new StoredRecordValidator(specLimitsFrom(config)) }),
    hypervisor: new LibvirtHypervisor({ uri: config.libvirt.uri, callTimeoutMs: config.libvirt.callTimeoutSec * 1000, logger, clock }),
    disks: new QemuImgDiskProvisioner({ logger }),
    images: new ImageGuard({ imageDirectories: config.imageDirectories, inspect: qemuImgInspector(inspector) }),
  });
  await agent.start();
  const bus = await connectBus(config.bus);
  const dbus = new DBusService({ bus, api: agent.service, logger });
  try {
    await dbus.start();
  } catch (err) {
    await agent.stop();
    bus.disconnect();
    throw err;
  }
  return {
    agent,
    dbus,
    bus,
    async stop() {
      await agent.stop();
      await dbus.stop();
      bus.disconnect();
    },
  };
}

