import { DBusError } from 'dbus-next';
import { annotationKeyProblem } from '../../machine/annotations.js';
import type { VmkeeperClient } from '../model.js';
import { type Command, writeJson } from '../command.js';
import { CtlError, ExitCode, UsageError } from '../errors.js';

export interface AnnotationChanges {
  set: Record<string, string>;
  remove: string[];
}

/** Checked here too: a key such as `__proto__` would otherwise vanish from the map before it is sent. */
function checkedKey(key: string): string {
  const problem = annotationKeyProblem(key);
  if (problem) throw new CtlError(`annotation key ${JSON.stringify(key)}: ${problem}`, ExitCode.InvalidInput);
  return key;
}

/** `key=value` sets, `key-` removes (as kubectl annotate does). */
export function parseAnnotationArgs(args: string[]): AnnotationChanges {
  const changes: AnnotationChanges = { set: {}, remove: [] };
  for (const arg of args) {
    const eq = arg.indexOf('=');
    if (eq > 0) changes.set[checkedKey(arg.slice(0, eq))] = arg.slice(eq + 1);
    else if (eq < 0 && arg.length > 1 && arg.endsWith('-')) changes.remove.push(arg.slice(0, -1));
    else throw new UsageError(`expected key=value or key- , not ${JSON.stringify(arg)}`, 'annotate');
  }
  return changes;
}

export function applyAnnotationChanges(current: Record<string, string>, changes: AnnotationChanges): Record<string, string> {
  const next = { ...current, ...changes.set };
  for (const key of changes.remove) delete next[key];
  return next;
}

/** Attempts at read, merge, compare-and-set before giving up on a machine that keeps changing. */
export const MAX_ATTEMPTS = 5;

const isConflict = (err: unknown) => err instanceof DBusError && err.type === 'org.vmkeeper1.Error.Conflict';

/** Read, merge, write with the version read; on Conflict read again. Resolves with what was written. */
export async function annotateIfUnchanged(client: VmkeeperClient, name: string, changes: AnnotationChanges): Promise<Record<string, string>> {
  for (let attempt = 1; ; attempt++) {
    const current = await client.machine(name);
    const next = applyAnnotationChanges(current.annotations, changes);
    try {
      await client.setMachineAnnotationsIfVersion(name, next, current.resourceVersion);
      return next;
    } catch (err) {
      if (!isConflict(err)) throw err;
      if (attempt >= MAX_ATTEMPTS) throw new CtlError(`${name} kept changing while being annotated (${MAX_ATTEMPTS} attempts); nothing was written by the last one, try again`, ExitCode.Conflict);
    }
  }
}

export const annotateCommand: Command = {
  name: 'annotate',
  summary: 'set (key=value) or remove (key-) annotations of a machine',
  usage: 'NAME key=value|key- ...',
  description:
    "Merges the changes into the machine's annotations: key=value sets a key, key- removes it,\n" +
    'every other key stays. The write names the ResourceVersion it read, so a change made by\n' +
    'someone else meanwhile is never overwritten: on a conflict it reads again, merges again and\n' +
    `retries, up to ${MAX_ATTEMPTS} times.`,
  options: [],
  args: { min: 2 },
  async run(ctx, args) {
    const [name, ...rest] = args.positionals as [string, ...string[]];
    const changes = parseAnnotationArgs(rest);
    const client = await ctx.client();
    const next = await annotateIfUnchanged(client, name, changes);
    if (ctx.json) writeJson(ctx, { name, annotations: next });
    else ctx.io.out(`${name}: annotated\n`);
    return 0;
  },
};
