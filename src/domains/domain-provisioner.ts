import type { DiskProvisioner, DomainDescription, Hypervisor } from '../hypervisor/port.js';
import type { ImageChecker } from '../hypervisor/image-guard.js';
import type { MachineRecord } from '../machine/record.js';
import { diskFile, machineDataDir, serialLogFile } from '../machine/paths.js';

/** Turns a record into a defined domain with its disks, and removes what it created. */
export class DomainProvisioner {
  constructor(
    private readonly hypervisor: Hypervisor,
    private readonly disks: DiskProvisioner,
    private readonly stateDir: string,
    /** Checks image paths on disk; records loaded from the state dir never went through the API. */
    private readonly images?: ImageChecker,
  ) {}

  /** Idempotent: existing disk files are kept, an existing definition is replaced by the same one. */
  async define(record: MachineRecord): Promise<void> {
    // Before qemu-img opens an image or libvirt is handed a kernel path.
    await this.images?.checkSpec(record.spec);
    await this.disks.ensureDir(machineDataDir(this.stateDir, record.name));
    const diskFiles = [];
    for (const disk of record.spec.disks) {
      const file = diskFile(this.stateDir, record.name, disk.name);
      await this.disks.createDisk(file, { backingImage: disk.image, sizeGiB: disk.sizeGiB });
      diskFiles.push(file);
    }
    await this.hypervisor.defineDomain(this.describe(record, diskFiles));
  }

  /** Removes every file the agent created for the machine (disks, serial log); images are never touched. */
  removeFiles(name: string): Promise<void> {
    return this.disks.removePath(machineDataDir(this.stateDir, name));
  }

  // Only what the domain needs: annotations change without a redefine, so a copy would go stale.
  private describe(record: MachineRecord, diskFiles: string[]): DomainDescription {
    const { spec } = record;
    return {
      domainName: record.domainName,
      uuid: record.uuid,
      machineName: record.name,
      domainType: spec.domainType,
      cpus: spec.cpus,
      memoryMiB: spec.memoryMiB,
      ...(spec.boot && { boot: { ...spec.boot } }),
      diskFiles,
      nics: spec.nics.map((nic) => (nic.network !== undefined ? { network: nic.network } : { bridge: nic.bridge ?? '' })),
      serialLogFile: serialLogFile(this.stateDir, record.name),
      createdAt: record.createdAt,
    };
  }
}
