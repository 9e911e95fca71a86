import * as v from 'valibot';
import { knownKeysObject } from './field-schemas.js';
import { isPlainObject } from './schema-issues.js';
import { machineSpecSchema, type SpecLimits } from './spec-schema.js';

// The persisted record's fields as a schema: record.ts takes its types from here, and the store
// checks every file it loads with it. What depends on the file (its name, the domain name derived
// from it) and the repair of old annotations stay with the store (store/record-validation.ts).

export const MACHINE_STATES = ['pending', 'running', 'stopping', 'stopped', 'terminating', 'terminated', 'error'] as const;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

const NUMBER = 'must be a number >= 0';
/** Milliseconds since the epoch (0 = unset), seconds, or a count. */
const nonNegative = v.pipe(v.number(NUMBER), v.finite(NUMBER), v.minValue(0, NUMBER));

export const machineStatusSchema = knownKeysObject({
  state: v.picklist(MACHINE_STATES, `must be one of ${MACHINE_STATES.join(', ')}`),
  /** Set while a shutdown (deletion or power-off) is in progress. */
  shutdownRequestedAt: nonNegative,
  forceStopAt: nonNegative,
  /** When the last ACPI request was sent: the retry timer runs from here. */
  lastShutdownSentAt: nonNegative,
  /** When the agent destroyed the domain because the deadline passed (0 = it went by itself). */
  forceStoppedAt: nonNegative,
  /** Grace period in force for the shutdown in progress. */
  gracePeriodSec: nonNegative,
  /** Whether a domain was ever defined for this record: one gone missing since is reported. */
  domainDefined: v.boolean('must be a boolean'),
  message: v.string('must be a string'),
});

/** The spec as the API checks it, minus annotations: the record keeps them once, outside. */
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

/** Every field but apiVersion, name and domainName, which the store checks against the file first. */
export function recordFieldsSchema(limits: SpecLimits) {
  return knownKeysObject({
    uuid: v.pipe(v.string('must be a UUID'), v.regex(UUID, 'must be a UUID')),
    createdAt: nonNegative,
    deletionTimestamp: nonNegative,
    /** Grace asked for at deletion; the deadline itself lives in status.forceStopAt. */
    deletionGracePeriodSec: nonNegative,
    resourceVersion: nonNegative,
    /** Checked entry by entry by the store, which drops (not refuses) what the grammar no longer allows. */
    annotations: v.custom<Record<string, unknown>>(isPlainObject, 'must be an object'),
    spec: storedSpecSchema(limits),
    status: machineStatusSchema,
  });
}
