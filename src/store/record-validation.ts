import { keepValidAnnotations } from '../machine/annotations.js';
import { domainNameFor, validateMachineName } from '../machine/names.js';
import type { MachineRecord } from '../machine/record.js';
import { recordFieldsSchema } from '../machine/record-schema.js';
import { type FieldProblem, isPlainObject, validate } from '../machine/schema-issues.js';
import type { SpecLimits } from '../machine/spec.js';
import { jsonErrorOffset } from './json-error-offset.js';
import { migrateToCurrent } from './record-migration.js';
import { InvalidStoredRecord } from './stored-record-error.js';

export { InvalidStoredRecord } from './stored-record-error.js';

// A record read back from disk is checked exactly as the API checks a new one (name, derived
// domain name, the spec against the configured limits), because the state dir gets backups,
// restores and hand edits: a record that would not be accepted over D-Bus is never acted on.
// Reasons name fields, never values: the file may be a copy of anything.

/** A key safe to log; anything else (a key made of arbitrary text) is not shown. */
const LOGGABLE_KEY = /^[A-Za-z0-9_-]{1,64}$/;

/** "spec.disks[0].image"; a key that is not plainly ours is not shown. */
function reasonField(problem: FieldProblem): string {
  let field = '';
  for (const key of problem.keyPath) {
    if (typeof key === 'number') field += `[${key}]`;
    else if (LOGGABLE_KEY.test(key)) field += field ? `.${key}` : key;
    else return `${field}.[a key not shown]`;
  }
  return field;
}

export class StoredRecordValidator {
  private readonly schema: ReturnType<typeof recordFieldsSchema>;

  constructor(limits: SpecLimits) {
    this.schema = recordFieldsSchema(limits);
  }

  /**
   * Returns the record in the current format, or throws InvalidStoredRecord whose message is the
   * reason to quarantine it. expectedName is the file's base name: a record must live in its own
   * file. warn hears what was repaired on the way in (annotations dropped), never the content;
   * migrated hears the older format a record was read as.
   */
  parse(text: string, expectedName: string, warn: (message: string) => void = () => {}, migrated: (from: string) => void = () => {}): MachineRecord {
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      const at = jsonErrorOffset(text);
      throw new InvalidStoredRecord(at === undefined ? 'not valid JSON' : `not valid JSON at byte ${at}`);
    }
    if (!isPlainObject(parsed)) throw new InvalidStoredRecord('(record): must be a JSON object');
    const { record: raw, migratedFrom } = migrateToCurrent(parsed);
    const name = checkedName(raw.name, expectedName);
    // The domain is what the agent starts, stops and undefines: never one it did not name itself.
    if (raw.domainName !== domainNameFor(name)) {
      throw new InvalidStoredRecord(`domainName: must be "${domainNameFor(name)}", derived from the name`);
    }
    const result = validate(this.schema, raw);
    if (!result.ok) throw new InvalidStoredRecord(`${reasonField(result.problem)}: ${result.problem.why}`);
    // An annotation that no longer meets the grammar is dropped, not the machine.
    const { kept: annotations, dropped } = keepValidAnnotations(result.value.annotations);
    if (dropped > 0) warn(`annotations: dropped ${dropped} that do not meet the annotation grammar (docs/dbus-api.md)`);
    if (migratedFrom !== undefined) migrated(migratedFrom);
    const { uuid, createdAt, deletionTimestamp, deletionGracePeriodSec, resourceVersion, spec, status } = result.value;
    const record: MachineRecord = {
      apiVersion: raw.apiVersion as MachineRecord['apiVersion'],
      name,
      uuid,
      domainName: raw.domainName as string,
      createdAt,
      deletionTimestamp,
      deletionGracePeriodSec,
      resourceVersion,
      annotations,
      spec,
      status,
    };
    return record;
  }
}

function checkedName(name: unknown, expectedName: string): string {
  if (typeof name !== 'string') throw new InvalidStoredRecord('name: must be a string');
  try {
    validateMachineName(name);
  } catch {
    throw new InvalidStoredRecord('name: is not a valid machine name');
  }
  if (name !== expectedName) throw new InvalidStoredRecord(`name: does not match the file name "${expectedName}.json"`);
  return name;
}
