import type { DiskProvisioner } from '../hypervisor/port.js';
import { savedStateFile } from '../machine/paths.js';

/**
 * The file a "save" at host shutdown or drain leaves for a machine (its guest's memory), as the
 * restore side sees it: there, gone after a restore or when stale, or set aside when libvirt
 * refused it. Every file access goes through the DiskProvisioner port.
 */
export class SavedStates {
  constructor(
    private readonly disks: DiskProvisioner,
    private readonly stateDir: string,
  ) {}

  fileOf(name: string): string {
    return savedStateFile(this.stateDir, name);
  }

  /** Where a state libvirt refused to restore is kept for the operator (replaced by a later one). */
  failedFileOf(name: string): string {
    return `${this.fileOf(name)}.failed`;
  }

  exists(name: string): Promise<boolean> {
    return this.disks.fileExists(this.fileOf(name));
  }

  discard(name: string): Promise<void> {
    return this.disks.removePath(this.fileOf(name));
  }

  setAside(name: string): Promise<void> {
    return this.disks.renameFile(this.fileOf(name), this.failedFileOf(name));
  }
}
