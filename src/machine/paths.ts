import path from 'node:path';

// Where a machine's own files live: everything in one folder, so deletion is one rm.

export const machineDataDir = (stateDir: string, name: string) => path.join(stateDir, 'guests', name);
export const diskFile = (stateDir: string, name: string, disk: string) => path.join(machineDataDir(stateDir, name), `disk-${disk}.qcow2`);
export const serialLogFile = (stateDir: string, name: string) => path.join(machineDataDir(stateDir, name), 'serial.log');
export const recordsDir = (stateDir: string) => path.join(stateDir, 'machines');
export const eventsDir = (stateDir: string) => path.join(stateDir, 'events');
/** Write-ahead journal of record changes; outside machines/ so readers of records never see it. */
export const recordJournalFile = (stateDir: string) => path.join(stateDir, 'journal', 'records.log');
