import { isAgentError } from '../machine/errors.js';
import { domainNameFor, validateMachineName } from '../machine/names.js';
import { type MachineRecord, RECORD_API_VERSION } from '../machine/record.js';
import { type SpecLimits, validateMachineSpec } from '../machine/spec.js';
import { keepValidAnnotations } from '../machine/annotations.js';
import { jsonErrorOffset } from './json-error-offset.js';

// A record read back from disk is checked exactly as the API checks a new one (name, derived
// domain name, the spec against the configured limits), because the state dir gets backups,
// restores and hand edits: a record that would not be accepted over D-Bus is never acted on.
// Reasons name fields, never values: the file may be a copy of anything.

const STATES = ['pending', 'running', 'stopping', 'stopped', 'terminating', 'terminated', 'error'];
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
/** A field path safe to log; anything else (a key made of arbitrary text) is not shown. */
const LOGGABLE_FIELD = /^[A-Za-z0-9_.\[\]()-]{1,80}$/;

type Json = Record<string, unknown>;
const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Why a stored record is refused; the message is the quarantine reason. */
export class InvalidStoredRecord extends Error {}

function need(ok: boolean, field: string, why: string): void {
  if (!ok) throw new InvalidStoredRecord(`${field}: ${why}`);
}
const num = (o: Json, k: string, at: string) =>
  need(typeof o[k] === 'number' && Number.isFinite(o[k]) && (o[k] as number) >= 0, at + k, 'must be a number >= 0');
const str = (o: Json, k: string, at: string) => need(typeof o[k] === 'string', at + k, 'must be a string');
const strings = (v: unknown) => Array.isArray(v) && v.every((s) => typeof s === 'string');

/** Re-words an InvalidSpec from spec.ts as a reason: `prefix` then the field, if it is safe to show. */
function specReason(err: unknown, prefix: string): InvalidStoredRecord {
  if (!isAgentError(err, 'InvalidSpec')) throw err;
  const m = /^spec field "(.*)": (.*)$/s.exec(err.message);
  let field = m?.[1] ?? '(spec)';
  // Keep the known part of a path (`annotations` in `annotations["..."]`), not the key itself.
  if (!LOGGABLE_FIELD.test(field)) field = `${/^[A-Za-z]+(?=[.[])/.exec(field)?.[0] ?? ''}[a key not shown]`;
  return new InvalidStoredRecord(`${field === '(spec)' ? prefix.replace(/\.$/, '') : prefix + field}: ${m?.[2] ?? 'is invalid'}`);
}

export class StoredRecordValidator {
  constructor(private readonly limits: SpecLimits) {}

  /**
   * Returns the record, or throws InvalidStoredRecord whose message is the reason to quarantine it.
   * expectedName is the file's base name: a record must live in its own file. warn hears what was
   * repaired on the way in (annotations dropped), never the content.
   */
  parse(text: string, expectedName: string, warn: (message: string) => void = () => {}): MachineRecord {
    let raw: unknown;
    try {
      raw = JSON.parse(text);
    } catch {
      const at = jsonErrorOffset(text);
      throw new InvalidStoredRecord(at === undefined ? 'not valid JSON' : `not valid JSON at byte ${at}`);
    }
    need(isObject(raw), '(record)', 'must be a JSON object');
    const r = raw as Json;
    need(r.apiVersion === RECORD_API_VERSION, 'apiVersion', `must be "${RECORD_API_VERSION}"`);
    str(r, 'name', '');
    try {
      validateMachineName(r.name);
    } catch {
      throw new InvalidStoredRecord('name: is not a valid machine name');
    }
    need(r.name === expectedName, 'name', `does not match the file name "${expectedName}.json"`);
    const name = r.name as string;
    // The domain is what the agent starts, stops and undefines: never one it did not name itself.
    need(r.domainName === domainNameFor(name), 'domainName', `must be "${domainNameFor(name)}", derived from the name`);
    need(typeof r.uuid === 'string' && UUID.test(r.uuid), 'uuid', 'must be a UUID');
    for (const k of ['createdAt', 'deletionTimestamp', 'deletionGracePeriodSec', 'resourceVersion']) num(r, k, '');
    need(strings(r.finalizers), 'finalizers', 'must be a list of strings');
    need(isObject(r.annotations), 'annotations', 'must be an object');
    // An annotation that no longer meets the grammar is dropped, not the machine.
    const { kept: annotations, dropped } = keepValidAnnotations(r.annotations as Json);
    if (dropped > 0) warn(`annotations: dropped ${dropped} that do not meet the annotation grammar (docs/dbus-api.md)`);
    return { ...(r as unknown as MachineRecord), annotations, spec: this.spec(r.spec), status: status(r.status) };
  }

  private spec(v: unknown): MachineRecord['spec'] {
    need(isObject(v), 'spec', 'must be an object');
    // Older records kept a copy of the annotations in the spec; the record's own are the one copy.
    const { annotations: _olderCopy, ...spec } = v as Json;
    try {
      const { annotations: _none, ...stored } = validateMachineSpec(spec, this.limits);
      return stored;
    } catch (err) {
      throw specReason(err, 'spec.');
    }
  }
}

function status(v: unknown): MachineRecord['status'] {
  need(isObject(v), 'status', 'must be an object');
  const s = v as Json;
  need(STATES.includes(s.state as string), 'status.state', `must be one of ${STATES.join(', ')}`);
  for (const k of ['shutdownRequestedAt', 'forceStopAt', 'lastShutdownSentAt', 'gracePeriodSec']) num(s, k, 'status.');
  if (s.forceStoppedAt !== undefined) num(s, 'forceStoppedAt', 'status.');
  str(s, 'message', 'status.');
  // Fields no longer used: tolerated when present, not required.
  need(s.domainDefined === undefined || typeof s.domainDefined === 'boolean', 'status.domainDefined', 'must be a boolean');
  need(s.createdFiles === undefined || strings(s.createdFiles), 'status.createdFiles', 'must be a list of strings');
  return s as unknown as MachineRecord['status'];
}
