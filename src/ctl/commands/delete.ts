import { parseSeconds, stringOption } from '../args.js';
import type { Command } from '../command.js';
import { WAIT_OPTIONS, requestAndMaybeWait } from './lifecycle.js';

export const deleteCommand: Command = {
  name: 'delete',
  summary: 'delete a machine gracefully (ACPI shutdown, then force stop at the deadline)',
  usage: 'NAME [--grace SECONDS] [--wait [--timeout SECONDS]]',
  description:
    "Starts a graceful deletion: the agent presses the guest's power button, presses it again every\n" +
    'few seconds, destroys the domain when the grace period runs out, then removes domain, disks\n' +
    "and record. --grace overrides the machine's grace period (it may shorten a deadline, never\n" +
    'lengthen it; 0 forces the stop now). --wait follows the deletion until the machine is gone.',
  options: [{ name: 'grace', value: 'SECONDS', help: 'grace period before the force stop (0 = now)' }, ...WAIT_OPTIONS],
  args: { min: 1, max: 1 },
  run(ctx, args) {
    const name = args.positionals[0]!;
    const graceText = stringOption(args, 'grace');
    const grace = graceText !== undefined ? parseSeconds(graceText, 'grace', 'delete') : undefined;
    return requestAndMaybeWait(ctx, args, {
      command: 'delete',
      name,
      goal: { kind: 'removed' },
      request: (client) => client.deleteMachine(name, grace),
      requested: grace !== undefined ? `deletion requested (grace ${grace}s)` : 'deletion requested',
    });
  },
};
