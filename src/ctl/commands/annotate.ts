import { annotationKeyProblem } from '../../machine/annotations.js';
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

export const annotateCommand: Command = {
  name: 'annotate',
  summary: 'set (key=value) or remove (key-) annotations of a machine',
  usage: 'NAME key=value|key- ...',
  description:
    "Merges the changes into the machine's annotations: key=value sets a key, key- removes it,\n" +
    'every other key stays. The agent replaces the whole set, so two people annotating the same\n' +
    'machine at the same moment can overwrite each other.',
  options: [],
  args: { min: 2 },
  async run(ctx, args) {
    const [name, ...rest] = args.positionals as [string, ...string[]];
    const changes = parseAnnotationArgs(rest);
    const client = await ctx.client();
    const current = (await client.machine(name)).annotations;
    const next = applyAnnotationChanges(current, changes);
    await client.setMachineAnnotations(name, next);
    if (ctx.json) writeJson(ctx, { name, annotations: next });
    else ctx.io.out(`${name}: annotated\n`);
    return 0;
  },
};
