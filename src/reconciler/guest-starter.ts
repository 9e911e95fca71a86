import type { Hypervisor } from '../hypervisor/port.js';
import type { Logger } from '../logging/logger.js';
import { AgentError, describeError } from '../machine/errors.js';
import type { MachineRecord } from '../machine/record.js';
import type { MachineRecords } from '../service/machine-records.js';
import type { SavedStates } from '../domains/saved-states.js';

/** How long a restore may take: the whole memory is read back from disk. */
export const RESTORE_TIMEOUT_MS = 10 * 60_000;

/** A saved state libvirt refused; the reconciler records it as RestoreFailed and backs off. */
export class RestoreFailure extends Error {
  constructor(message: string, readonly setAside: boolean) {
    super(message);
  }
}

export interface GuestStarterOptions {
  hypervisor: Hypervisor;
  savedStates: SavedStates;
  records: MachineRecords;
  logger: Logger;
}

/**
 * Brings one stopped guest up: resumed from its saved state when a "save" left one, booted
 * otherwise. Also throws away a saved state that went stale because the guest ran without it.
 */
export class GuestStarter {
  constructor(private readonly o: GuestStarterOptions) {}

  /** Throws RestoreFailure when libvirt refused the saved state, other errors as they come. */
  async start(record: MachineRecord, restartingAfterOutsideStop: boolean): Promise<'started' | 'restored'> {
    if (await this.o.savedStates.exists(record.name)) {
      await this.restore(record);
      return 'restored';
    }
    await this.o.hypervisor.startDomain(record.domainName);
    this.o.records.event(record.name, 'normal', 'Started', restartingAfterOutsideStop
      ? `domain ${record.domainName} started again after it stopped outside the agent`
      : `domain ${record.domainName} started`);
    return 'started';
  }

  /**
   * The domain runs although its saved state is still there (started outside the agent): that
   * state is stale, and restoring it later would put old memory over disks that moved on.
   */
  async discardStale(record: MachineRecord): Promise<void> {
    if (!(await this.o.savedStates.exists(record.name))) return;
    await this.o.savedStates.discard(record.name);
    this.o.records.event(record.name, 'warning', 'SavedStateDiscarded',
      `domain ${record.domainName} is running although it has a saved state (started outside the agent?); ` +
      'the saved state is stale and was deleted: restoring it would roll the guest back over disks that moved on');
  }

  private async restore(record: MachineRecord): Promise<void> {
    const { name, domainName } = record;
    try {
      await this.o.hypervisor.restoreDomain(this.o.savedStates.fileOf(name), RESTORE_TIMEOUT_MS);
    } catch (err) {
      // libvirt away or too slow says nothing about the file: the retry restores it again.
      if (err instanceof AgentError && err.kind === 'HypervisorUnavailable') throw err;
      throw await this.setAside(record, describeError(err));
    }
    this.o.records.event(name, 'normal', 'Restored', `domain ${domainName} resumed from its saved state`);
    // A file left behind would be restored again at the next start, over a guest that ran on:
    // the caller's next look at the running domain deletes it as stale.
    await this.o.savedStates.discard(name);
  }

  /**
   * A state libvirt refuses (corrupt, cut short, from another qemu or CPU) will not restore on a
   * retry either: keep it aside for the operator and let the retry boot the guest afresh, as if
   * it had been shut down, rather than keep the machine down retrying the same file.
   */
  private async setAside(record: MachineRecord, why: string): Promise<RestoreFailure> {
    const failed = this.o.savedStates.failedFileOf(record.name);
    try {
      await this.o.savedStates.setAside(record.name);
    } catch (err) {
      this.o.logger.error(`${record.name}: could not set the saved state aside: ${describeError(err)}`);
      return new RestoreFailure(`resuming domain ${record.domainName} from its saved state failed: ${why}; ` +
        `the state could not be set aside (${describeError(err)}), so the retry restores it again`, false);
    }
    return new RestoreFailure(`resuming domain ${record.domainName} from its saved state failed: ${why}; ` +
      `the state is kept as ${failed} and the retry boots the guest afresh`, true);
  }
}
