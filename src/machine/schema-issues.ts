import * as v from 'valibot';

// The one bridge from valibot's issues to our errors. Spec, config and stored records each word
// their errors differently (InvalidSpec, file:line: key, a reason that never quotes content), but
// all of them need the same two things from an issue: where it is and why.

/** Keys and indices from the root to the offending value: ['disks', 0, 'name']. */
export type KeyPath = (string | number)[];

export interface FieldProblem {
  keyPath: KeyPath;
  /** Set when the problem is a key of a free-form map (annotations), not its value. */
  atMapKey: boolean;
  why: string;
}

/**
 * Runs schema on input; the output, or the first problem (schemas here abort early, so the first
 * is the one a hand-written validator would have thrown).
 */
export function validate<S extends v.GenericSchema>(schema: S, input: unknown): { ok: true; value: v.InferOutput<S> } | { ok: false; problem: FieldProblem } {
  const result = v.safeParse(schema, input, { abortEarly: true });
  if (result.success) return { ok: true, value: result.output };
  return { ok: false, problem: problemOf(result.issues[0]) };
}

export function problemOf(issue: v.BaseIssue<unknown>): FieldProblem {
  const items = issue.path ?? [];
  const keyPath = items.map((item) => item.key as string | number);
  const last = items.at(-1);
  return { keyPath, atMapKey: last?.type === 'unknown' && last.origin === 'key', why: issue.message };
}

/** "disks[0].name"; a map key is shown quoted and shortened (it may be hostile): annotations["a b"]. */
export function dottedPath(problem: Pick<FieldProblem, 'keyPath' | 'atMapKey'>): string {
  return problem.keyPath
    .map((k, i) => {
      if (typeof k === 'number') return `[${k}]`;
      if (problem.atMapKey && i === problem.keyPath.length - 1) return `[${JSON.stringify(k.length > 64 ? `${k.slice(0, 64)}...` : k)}]`;
      return i === 0 ? k : `.${k}`;
    })
    .join('');
}

/**
 * Path items for an issue raised by a check on a free-form map (rawCheck), at one of its keys or
 * values. valibot's own object items mean a known key; 'unknown' marks a key of ours to quote.
 */
export function mapEntryPath(input: Record<string, unknown>, key: string, origin: 'key' | 'value'): [v.IssuePathItem] {
  return [{ type: 'unknown', origin, input, key, value: input[key] }];
}

/** True for a JSON object: valibot's object schemas also take arrays, ours never do. */
export const isPlainObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);
