import * as v from 'valibot';
import { keepValidAnnotations } from '../machine/annotations.js';
import { knownKeysObject } from '../machine/field-schemas.js';
import { domainNameFor, validateMachineName } from '../machine/names.js';
import type { MachineRecord } from '../machine/record.js';
import { type FieldProblem, isPlainObject, validate } from '../machine/schema-issues.js';
import type { SpecLimits } from '../machine/spec.js';
import { machineSpecSchema } from '../machine/spec-schema.js';
import { jsonErrorOffset } from './json-error-offset.js';
import { migrateToCurrent } from './record-migration.js';
import { InvalidStoredRecord } from './stored-record-error.js';

export { InvalidStoredRecord } from './stored-record-error.js';

// A record read back from disk is checked exactly as the API checks a new one (name, derived
// domain name, the spec against the configured limits), because the state dir gets backups,
// restores and hand edits: a record that would not be accepted over D-Bus is never acted on.
// Reasons name fields, never values: the file may be a copy of anything.

const STATES = ['pending', 'running', 'stopping', 'stopped', 'terminating', 'terminated', 'error'] as const;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
/** A key safe to log; anything else (a key made of arbitrary text) is not shown. */
const LOGGABLE_KEY = /^[A-Za-z0-9_-]{1,64}$/;

const NUMBER = 'must be a number >= 0';
const time = v.pipe(v.number(NUMBER), v.finite(NUMBER), v.minValue(0, NUMBER));

const statusSchema = knownKeysObject({
  state: v.picklist(STATES, `must be one of ${STATES.join(', ')}`),
  shutdownRequestedAt: time,
  forceStopAt: time,
  lastShutdownSentAt: time,
  forceStoppedAt: time,
  gracePeriodSec: time,
  domainDefined: v.boolean('must be a boolean'),
  message: v.string('must be a string'),
});

/** The spec as the API checks it, minus annotations: a current record keeps them once, outside. */
function storedSpecSchema(limits: SpecLimits) {
  return v.pipe(
    v.custom<Record<string, unknown>>(isPlainObject, 'must be an object'),
    v.rawCheck<Record<string, unknown>>(({ dataset, addIssue }) => {
      if (dataset.typed && Object.hasOwn(dataset.value, 'annotations')) {
        addIssue({ message: 'unknown key', path: [{ type: 'object', origin: 'key', input: dataset.value, key: 'annotations', value: dataset.value.annotations }] });
      }
    }),
    machineSpecSchema(limits),
    v.transform(({ annotations: _none, ...stored }) => stored),
  );
}

function storedRecordSchema(limits: SpecLimits) {
  return knownKeysObject({
    uuid: v.pipe(v.string('must be a UUID'), v.regex(UUID, 'must be a UUID')),
    createdAt: time,
    deletionTimestamp: time,
    deletionGracePeriodSec: time,
    resourceVersion: time,
    annotations: v.custom<Record<string, unknown>>(isPlainObject, 'must be an object'),
    spec: storedSpecSchema(limits),
    status: statusSchema,
  });
}

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
  private readonly schema: ReturnType<typeof storedRecordSchema>;

  constructor(limits: SpecLimits) {
    this.schema = storedRecordSchema(limits);
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
