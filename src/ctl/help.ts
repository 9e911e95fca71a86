import type { OptionSpec } from './args.js';
import type { Command } from './command.js';

export const PROGRAM = 'vmkeeperctl';

export const GLOBAL_OPTIONS: OptionSpec[] = [
  { name: 'bus', value: 'ADDRESS', help: 'system (default), session, or a D-Bus address such as unix:path=/run/x/bus' },
  { name: 'json', help: 'print machine-readable JSON on stdout' },
  { name: 'help', short: 'h', help: 'show help' },
];

function optionLines(options: OptionSpec[]): string {
  const left = options.map((o) => `${o.short ? `-${o.short}, ` : '    '}--${o.name}${o.value ? ` ${o.value}` : ''}`);
  const width = Math.max(...left.map((l) => l.length)) + 2;
  return options.map((o, i) => `  ${left[i]!.padEnd(width)}${o.help}`).join('\n');
}

export function programHelp(commands: Command[]): string {
  const width = Math.max(...commands.map((c) => c.name.length)) + 2;
  return (
    `Usage: ${PROGRAM} [--bus ADDRESS] [--json] COMMAND [ARGS...]\n\n` +
    'Operate the machines of vmkeeperd over its D-Bus API (org.vmkeeper1).\n\n' +
    `Commands:\n${commands.map((c) => `  ${c.name.padEnd(width)}${c.summary}`).join('\n')}\n\n` +
    `Options:\n${optionLines(GLOBAL_OPTIONS)}\n\n` +
    `Run '${PROGRAM} COMMAND --help' for a command's options; exit codes are in ${PROGRAM}(1).\n`
  );
}

export function commandHelp(c: Command): string {
  const options = [...c.options, ...GLOBAL_OPTIONS];
  return (
    `Usage: ${PROGRAM} [--bus ADDRESS] [--json] ${c.name}${c.usage ? ` ${c.usage}` : ''}\n\n` +
    `${c.description}\n\n` +
    `Options:\n${optionLines(options)}\n`
  );
}
