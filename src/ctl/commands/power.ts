import type { Command } from '../command.js';
import { WAIT_OPTIONS, requestAndMaybeWait } from './lifecycle.js';

function powerCommand(power: 'on' | 'off'): Command {
  const off = power === 'off';
  const name = off ? 'poweroff' : 'poweron';
  return {
    name,
    summary: off ? 'shut a machine down gracefully; it and its disks stay' : 'start a stopped machine',
    usage: 'NAME [--wait [--timeout SECONDS]]',
    description: off
      ? 'Sets the desired power to off: an ACPI shutdown, resent every few seconds and forced at the\n' +
        "deadline (the machine's grace period). --wait follows it until the state is stopped."
      : 'Sets the desired power to on; a power-off in progress is cancelled and the agent starts the\n' +
        'domain. --wait follows it until the state is running.',
    options: WAIT_OPTIONS,
    args: { min: 1, max: 1 },
    run(ctx, args) {
      const machine = args.positionals[0]!;
      return requestAndMaybeWait(ctx, args, {
        command: name,
        name: machine,
        goal: { kind: 'state', state: off ? 'stopped' : 'running' },
        request: (client) => client.setMachinePower(machine, power),
        requested: off ? 'power-off requested' : 'power-on requested',
      });
    },
  };
}

export const poweroffCommand = powerCommand('off');
export const poweronCommand = powerCommand('on');
