import { validateMachineName } from '../machine/names.js';
import { type MachineRecord, RECORD_API_VERSION } from '../machine/record.js';

// Shape check for records read back from disk. Deliberately not validateMachineSpec: a record
// accepted once must still load after the operator narrows imageDirectories or limits.

const STATES = ['pending', 'running', 'stopping', 'stopped', 'terminating', 'terminated', 'error'];

type Json = Record<string, unknown>;
const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

class Bad extends Error {}

function need(ok: boolean, field: string, why: string): void {
  if (!ok) throw new Bad(`${field}: ${why}`);
}
const num = (o: Json, k: string, at: string) => need(typeof o[k] === 'number' && Number.isFinite(o[k]), at + k, 'must be a number');
const str = (o: Json, k: string, at: string) => need(typeof o[k] === 'string', at + k, 'must be a string');
const bool = (o: Json, k: string, at: string) => need(typeof o[k] === 'boolean', at + k, 'must be a boolean');
const strings = (o: Json, k: string, at: string) =>
  need(Array.isArray(o[k]) && (o[k] as unknown[]).every((s) => typeof s === 'string'), at + k, 'must be a list of strings');
const stringMap = (o: Json, k: string, at: string) =>
  need(isObject(o[k]) && Object.values(o[k] as Json).every((s) => typeof s === 'string'), at + k, 'must be a map of strings');

/**
 * Returns the parsed record, or throws an Error whose message is the reason to quarantine it.
 * expectedName is the file's base name: a record must live in its own file.
 */
export function parseStoredRecord(text: string, expectedName: string): MachineRecord {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    throw new Error(`not valid JSON: ${(err as Error).message}`);
  }
  try {
    need(isObject(raw), '(record)', 'must be a JSON object');
    const r = raw as Json;
    need(r.apiVersion === RECORD_API_VERSION, 'apiVersion', `must be "${RECORD_API_VERSION}" (got ${JSON.stringify(r.apiVersion)})`);
    str(r, 'name', '');
    try {
      validateMachineName(r.name);
    } catch (err) {
      throw new Bad(`name: ${(err as Error).message}`);
    }
    need(r.name === expectedName, 'name', `"${String(r.name)}" does not match the file name "${expectedName}.json"`);
    for (const k of ['uuid', 'domainName']) str(r, k, '');
    for (const k of ['createdAt', 'deletionTimestamp', 'deletionGracePeriodSec', 'resourceVersion']) num(r, k, '');
    strings(r, 'finalizers', '');
    stringMap(r, 'annotations', '');

    need(isObject(r.spec), 'spec', 'must be an object');
    const spec = r.spec as Json;
    num(spec, 'cpus', 'spec.');
    num(spec, 'memoryMiB', 'spec.');
    need(spec.domainType === 'kvm' || spec.domainType === 'qemu', 'spec.domainType', 'must be "kvm" or "qemu"');
    need(spec.power === 'on' || spec.power === 'off', 'spec.power', 'must be "on" or "off"');
    need(Array.isArray(spec.disks) && spec.disks.every(isObject), 'spec.disks', 'must be a list of objects');
    need(Array.isArray(spec.nics) && spec.nics.every(isObject), 'spec.nics', 'must be a list of objects');
    stringMap(spec, 'annotations', 'spec.');
    need(spec.boot === undefined || (isObject(spec.boot) && typeof spec.boot.kernel === 'string'), 'spec.boot', 'must be an object with a kernel');

    need(isObject(r.status), 'status', 'must be an object');
    const status = r.status as Json;
    need(STATES.includes(status.state as string), 'status.state', `must be one of ${STATES.join(', ')}`);
    for (const k of ['shutdownRequestedAt', 'forceStopAt', 'lastShutdownSentAt', 'gracePeriodSec']) num(status, k, 'status.');
    bool(status, 'domainDefined', 'status.');
    strings(status, 'createdFiles', 'status.');
    str(status, 'message', 'status.');
    return r as unknown as MachineRecord;
  } catch (err) {
    if (err instanceof Bad) throw new Error(err.message);
    throw err;
  }
}
