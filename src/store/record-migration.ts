import * as v from 'valibot';
import { RECORD_API_VERSION } from '../machine/record.js';
import { knownKeysObject } from '../machine/field-schemas.js';
import { dottedPath, isPlainObject, validate } from '../machine/schema-issues.js';
import { InvalidStoredRecord } from './stored-record-error.js';

// Older on-disk formats are brought to the current one in memory, at load; the store writes the
// current format on the record's next change (no write at load: start-up stays read-only and a
// crash during it cannot touch a record). A record from a newer agent is never guessed at.

/** Records up to 0.1: they carried fields nobody read (finalizers, status.createdFiles, spec.annotations). */
export const RECORD_API_VERSION_V1 = 'vmkeeper/v1';

const READABLE = [RECORD_API_VERSION_V1, RECORD_API_VERSION];
const NUMBERED = /^vmkeeper\/v([1-9][0-9]{0,5})$/;
const CURRENT_NUMBER = Number(NUMBERED.exec(RECORD_API_VERSION)![1]);

const listOfStrings = v.array(v.string(), 'must be a list of strings');

// The dropped fields are still checked as v1 checked them: a damaged v1 record stays refused.
const v1OnlyFields = knownKeysObject({
  finalizers: listOfStrings,
  status: v.optional(knownKeysObject({ createdFiles: v.optional(listOfStrings) })),
});

type Json = Record<string, unknown>;

/** The record in the current format, and the version it was read as when that was an older one. */
export function migrateToCurrent(raw: Json): { record: Json; migratedFrom?: string } {
  const version = raw.apiVersion;
  if (version === RECORD_API_VERSION) return { record: raw };
  if (version === RECORD_API_VERSION_V1) return { record: v1ToV2(raw), migratedFrom: RECORD_API_VERSION_V1 };
  // Only a version of our own exact shape is shown: the field may hold any text.
  const numbered = typeof version === 'string' ? NUMBERED.exec(version) : null;
  if (numbered && Number(numbered[1]) > CURRENT_NUMBER) {
    throw new InvalidStoredRecord(`apiVersion: written by a newer vmkeeper (${version}); this one reads ${READABLE.join(' and ')}`);
  }
  throw new InvalidStoredRecord(`apiVersion: must be ${READABLE.map((x) => `"${x}"`).join(' or ')}`);
}

function v1ToV2(raw: Json): Json {
  const checked = validate(v1OnlyFields, isPlainObject(raw.status) ? raw : { ...raw, status: undefined });
  if (!checked.ok) throw new InvalidStoredRecord(`${dottedPath(checked.problem)}: ${checked.problem.why}`);
  const { finalizers: _unread, ...record } = raw;
  record.apiVersion = RECORD_API_VERSION;
  if (isPlainObject(raw.spec)) {
    // The record's own annotations are the one copy; a v1 spec could still hold an older one.
    const { annotations: _olderCopy, ...spec } = raw.spec;
    record.spec = spec;
  }
  if (isPlainObject(raw.status)) {
    // Early v1 records predate forceStoppedAt and domainDefined: both meant "not yet".
    const { createdFiles: _unread, ...status } = raw.status;
    record.status = { forceStoppedAt: 0, domainDefined: false, ...status };
  }
  return record;
}
