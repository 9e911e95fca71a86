import type { CallOptions } from '../service/api.js';
import type { ShutdownRecord, ShutdownRecordReader } from '../hostshutdown/stop-procedure.js';
import { noSuchShutdownRecord } from '../machine/errors.js';
import type { DrainController, DrainState } from './drain-controller.js';

// What the D-Bus edge may call about the host as a whole (not one machine): drain, undrain, and
// the records of past host shutdowns and drains.

export interface HostApi {
  drainState(): DrainState;
  drain(options?: CallOptions): Promise<void>;
  undrain(options?: CallOptions): Promise<void>;
  /** Oldest first. */
  shutdownRecords(): readonly ShutdownRecord[];
  /** Throws NoSuchShutdownRecord. */
  shutdownRecord(id: string): ShutdownRecord;
  onDrainState(listener: (state: DrainState) => void): void;
  offDrainState(listener: (state: DrainState) => void): void;
}

export function hostApi(drain: DrainController, records: ShutdownRecordReader): HostApi {
  return {
    drainState: () => drain.state,
    drain: (options) => drain.drain(options?.actor),
    undrain: (options) => drain.undrain(options?.actor),
    shutdownRecords: () => records.list(),
    shutdownRecord: (id) => {
      const record = records.get(id);
      if (!record) throw noSuchShutdownRecord(id);
      return record;
    },
    onDrainState: (listener) => drain.emitter.on('changed', listener),
    offDrainState: (listener) => drain.emitter.off('changed', listener),
  };
}
