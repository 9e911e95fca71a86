import * as v from 'valibot';
import { isPlainObject } from './schema-issues.js';
import { textProblem } from './text-rules.js';

// The building blocks of the spec schema, each with the message the API has always answered.

export const integerIn = (min: number, max: number) =>
  v.pipe(
    v.number('must be an integer'),
    v.integer('must be an integer'),
    v.minValue(min, `must be between ${min} and ${max}`),
    v.maxValue(max, `must be between ${min} and ${max}`),
  );

/** A check that the string meets text-rules.ts. */
export const meetsTextRules = (allowTabNewline = false) =>
  v.rawCheck<string>(({ dataset, addIssue }) => {
    if (!dataset.typed) return;
    const problem = textProblem(dataset.value, allowTabNewline);
    if (problem) addIssue({ message: problem });
  });

// Control characters have no place in paths, names or a kernel command line, NUL cannot survive
// the trip into libvirt's C strings, and the spec is sent back on the bus as it was given.
export const text = (maxLength: number) =>
  v.pipe(v.string('must be a string'), v.maxLength(maxLength, `must be at most ${maxLength} characters`), meetsTextRules());

export const oneOf = <const T extends readonly [string, ...string[]]>(values: T) =>
  v.picklist(values, `must be ${values.map((x) => `"${x}"`).join(' or ')}`);

/**
 * A JSON object with exactly these keys: an unknown key is refused so a typo never silently
 * becomes a default. `missing` is the message for an absent required key.
 */
export const strictJsonObject = <E extends v.ObjectEntries>(entries: E, missing = 'is required') =>
  v.pipe(
    v.custom<Record<string, unknown>>(isPlainObject, 'must be an object'),
    v.strictObject(entries, (issue) => (issue.expected === 'never' ? 'unknown key' : issue.expected?.startsWith('"') ? missing : 'must be an object')),
  );

/**
 * A list of at most `max` named items, the length checked before the items as the API always did,
 * and no name twice (the later one is named).
 */
export const namedList = <S extends v.GenericSchema<unknown, { name: string }>>(item: S, max: number, what: string) =>
  v.pipe(
    v.custom<unknown[]>(Array.isArray, 'must be an array'),
    v.maxLength(max, `must have at most ${max} entries`),
    v.array(item),
    v.rawCheck<v.InferOutput<S>[]>(({ dataset, addIssue }) => {
      if (!dataset.typed) return;
      const seen = new Set<string>();
      for (const [index, item] of dataset.value.entries()) {
        if (seen.has(item.name)) {
          addIssue({
            message: `duplicate ${what} name "${item.name}"`,
            path: [
              { type: 'array', origin: 'value', input: dataset.value, key: index, value: item },
              { type: 'object', origin: 'value', input: item, key: 'name', value: item.name },
            ],
          });
          return;
        }
        seen.add(item.name);
      }
    }),
  );

/**
 * A JSON object whose unknown keys are dropped rather than refused (a stored record: what an
 * older or newer writer left is no reason to lose a machine). An absent key gets the message of
 * its own field's schema, as if it had been given the wrong type.
 */
export const knownKeysObject = <E extends v.ObjectEntries>(entries: E) =>
  v.pipe(
    v.custom<Record<string, unknown>>(isPlainObject, 'must be an object'),
    v.object(entries, (issue) => {
      const key = issue.path?.at(-1)?.key;
      const fieldMessage = typeof key === 'string' && Object.hasOwn(entries, key) ? (entries[key] as { message?: unknown }).message : undefined;
      return typeof fieldMessage === 'string' ? fieldMessage : 'must be an object';
    }),
  );
