import type { DiskProvisioner, Hypervisor } from '../hypervisor/port.js';
import { buildDomainXml, isOurDomainXml } from '../hypervisor/domain-xml.js';
import type { ImageChecker } from '../hypervisor/image-guard.js';
import type { MachineRecord } from '../machine/record.js';
import { diskFile, machineDataDir, serialLogFile } from '../machine/paths.js';

/** Turns a record into a defined libvirt domain with its disks, and removes what it created. */
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
    const disks = [];
    for (const disk of record.spec.disks) {
      const file = diskFile(this.stateDir, record.name, disk.name);
      await this.disks.createDisk(file, { backingImage: disk.image, sizeGiB: disk.sizeGiB });
      disks.push({ name: disk.name, file });
    }
    const xml = buildDomainXml({
      domainName: record.domainName,
      uuid: record.uuid,
      machineName: record.name,
      spec: record.spec,
      disks,
      serialLogFile: serialLogFile(this.stateDir, record.name),
      createdAt: record.createdAt,
    });
    await this.hypervisor.defineDomain({ name: record.domainName, uuid: record.uuid, xml });
  }

  /** Removes every file the agent created for the machine (disks, serial log); images are never touched. */
  removeFiles(name: string): Promise<void> {
    return this.disks.removePath(machineDataDir(this.stateDir, name));
  }

  isOurs(xml: string): boolean {
    return isOurDomainXml(xml);
  }
}
