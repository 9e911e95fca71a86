import { specView, type MachineRecord } from './record.js';

/** The whole record as the JSON that Describe/DescribeMachine return (times in ms and RFC 3339). */
export function describeRecord(r: MachineRecord): string {
  const iso = (ms: number) => (ms > 0 ? new Date(ms).toISOString() : null);
  return JSON.stringify({
    apiVersion: r.apiVersion,
    metadata: {
      name: r.name,
      uuid: r.uuid,
      domainName: r.domainName,
      createdAt: iso(r.createdAt),
      deletionTimestamp: iso(r.deletionTimestamp),
      deletionGracePeriodSec: r.deletionTimestamp > 0 ? r.deletionGracePeriodSec : null,
      resourceVersion: r.resourceVersion,
      annotations: r.annotations,
    },
    spec: specView(r),
    status: {
      state: r.status.state,
      power: r.spec.power,
      shutdownRequestedAt: iso(r.status.shutdownRequestedAt),
      forceStopAt: iso(r.status.forceStopAt),
      gracePeriodSec: r.status.gracePeriodSec,
      message: r.status.message,
    },
  });
}
