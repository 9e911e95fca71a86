import path from 'node:path';

// Where a machine's own files live: everything in one folder, so deletion is one rm.

export const machineDataDir = (stateDir: string, name: string) => path.join(stateDir, 'guests', name);
export const diskFile = (stateDir: string, name: string, disk: string) => path.join(machineDataDir(stateDir, name), `disk-${disk}.qcow2`);
export const serialLogFile = (stateDir: string, name: string) => path.join(machineDataDir(stateDir, name), 'serial.log');
/** The guest's memory, written by libvirt at a "save" host shutdown or drain, read back at restore. */
export const savedStateFile = (stateDir: string, name: string) => path.join(machineDataDir(stateDir, name), 'saved-state');
/** One JSON file per host shutdown or drain: what happened to each machine (docs/operations.md). */
export const shutdownRecordsDir = (stateDir: string) => path.join(stateDir, 'shutdowns');
/** Whether the host is drained, kept across restarts of the agent. */
export const drainStateFile = (stateDir: string) => path.join(stateDir, 'drain.json');
export const recordsDir = (stateDir: string) => path.join(stateDir, 'machines');
/** The parsed records as of the last clean stop, which the next start reads first (a cache of machines/). */
export const recordsSnapshotFile = (stateDir: string) => path.join(stateDir, 'records.snapshot');
export const eventsDir = (stateDir: string) => path.join(stateDir, 'events');
/** Write-ahead journal of record changes; outside machines/ so readers of records never see it. */
export const recordJournalFile = (stateDir: string) => path.join(stateDir, 'journal', 'records.log');
