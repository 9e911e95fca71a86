import { stringOption } from '../args.js';
import { type Command, writeJson } from '../command.js';
import { CtlError, ExitCode, UsageError, firstLine, toCtlError } from '../errors.js';
import { invalidField, parseSpecText } from '../spec-file.js';

export const createCommand: Command = {
  name: 'create',
  summary: 'create a machine from a JSON or YAML spec',
  usage: 'NAME -f FILE',
  description:
    'Creates machine NAME from the spec in FILE (JSON or YAML; "-" reads standard input). The agent\n' +
    'stores the record, then defines and starts the domain: follow it with `status` or `list`.\n' +
    'A rejected spec is reported with the field at fault and, where possible, its line in FILE.',
  options: [{ name: 'filename', short: 'f', value: 'FILE', help: 'spec file (JSON or YAML), or - for standard input' }],
  args: { min: 1, max: 1 },
  async run(ctx, args) {
    const name = args.positionals[0]!;
    const file = stringOption(args, 'filename');
    if (file === undefined) throw new UsageError('create needs a spec: -f FILE (or -f - for standard input)', 'create');
    const label = file === '-' ? '<stdin>' : file;
    let text: string;
    try {
      text = file === '-' ? await ctx.io.readStdin() : await ctx.io.readFile(file);
    } catch (err) {
      throw new CtlError(`cannot read ${label}: ${firstLine(err instanceof Error ? err.message : String(err))}`, ExitCode.Failure);
    }
    const spec = parseSpecText(text, label);
    let path: string;
    try {
      path = await (await ctx.client()).createMachine(name, spec.json);
    } catch (err) {
      const e = toCtlError(err);
      const field = e.exitCode === ExitCode.InvalidInput ? invalidField(e.message) : undefined;
      const where = field ? spec.locate(field) : undefined;
      throw where ? new CtlError(`${e.message} (${where})`, e.exitCode) : e;
    }
    if (ctx.json) writeJson(ctx, { name, path });
    else ctx.io.out(`${name}: created\n`);
    return 0;
  },
};
