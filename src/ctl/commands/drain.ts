import { flag } from '../args.js';
import { type Command, type Context, writeJson } from '../command.js';
import { CtlError, ExitCode } from '../errors.js';
import { holdSignals } from '../held-signals.js';
import type { AgentEvent, AgentSignal } from '../model.js';
import { eventJson, eventLine } from './events.js';

// drain / undrain: the host as a whole. drain --wait follows the events of the run (each machine
// stopped or saved, by priority) until the drain completes or is cancelled.

/** Host-level events (machine "") that end a wait for a drain, and whether it succeeded. */
const DRAIN_END: Record<string, boolean> = { DrainCompleted: true, DrainCancelled: false, Undrained: false };

export const drainCommand: Command = {
  name: 'drain',
  summary: 'stop every machine for maintenance and keep them off until undrain',
  usage: '[--wait]',
  description:
    "Drains the host: every machine is shut down, saved or forced off by its hostShutdownAction, in\n" +
    'shutdownPriority groups, as at a host shutdown, and none is started until `vmkeeperctl undrain`\n' +
    '(also across a restart of vmkeeperd or of the host). Machines keep power "on" in their records.\n' +
    '--wait prints the events of the drain until it completes (exit 0) or is cancelled (exit 8).',
  options: [{ name: 'wait', help: 'follow the drain until it completes or is cancelled' }],
  args: { min: 0, max: 0 },
  async run(ctx, args) {
    const client = await ctx.client();
    if (!flag(args, 'wait')) {
      await client.drain();
      const state = (await client.managerInfo()).drainState;
      if (ctx.json) writeJson(ctx, { requested: 'drain', drainState: state });
      else ctx.io.out(`drain requested (DrainState: ${state || 'unknown'})\n`);
      return 0;
    }
    // Subscribe before the call: the first events of the run may come before its reply.
    const signals = await holdSignals(client);
    try {
      await client.drain();
      return await followDrain(ctx, signals.release.bind(signals), async () => (await client.managerInfo()).drainState);
    } finally {
      signals.close();
    }
  },
};

export const undrainCommand: Command = {
  name: 'undrain',
  summary: 'end a drain: machines start again in start-priority order',
  usage: '',
  description:
    'Cancels a drain under way (the machines not yet stopped keep running) or ends a drained state;\n' +
    'vmkeeperd then starts the machines whose power is "on" again, by startPriority. Changes nothing\n' +
    'when the host is not drained.',
  options: [],
  args: { min: 0, max: 0 },
  async run(ctx) {
    const client = await ctx.client();
    await client.undrain();
    if (ctx.json) writeJson(ctx, { requested: 'undrain', drainState: (await client.managerInfo()).drainState });
    else ctx.io.out('undrained: machines start again\n');
    return 0;
  },
};

/** Prints events until the drain ends; the state is read once the held signals are replayed (it may be over already). */
function followDrain(ctx: Context, release: (handler: (s: AgentSignal) => void) => void, drainState: () => Promise<string>): Promise<number> {
  return new Promise<number>((resolve, reject) => {
    let done = false;
    let lastSequence = 0;
    const finish = (outcome: number | Error, line?: string) => {
      if (done) return;
      done = true;
      ctx.signal.removeEventListener('abort', onAbort);
      if (line && !ctx.json) ctx.io.out(`${line}\n`);
      if (outcome instanceof Error) reject(outcome);
      else resolve(outcome);
    };
    const onAbort = () => finish(new CtlError('interrupted; the drain goes on (vmkeeperctl undrain cancels it)', ExitCode.Interrupted));
    const show = (e: AgentEvent) => {
      if ((e.sequence ?? 0) <= lastSequence) return; // each event once, by sequence
      lastSequence = e.sequence ?? lastSequence;
      ctx.io.out(ctx.json ? `${JSON.stringify(eventJson(e))}\n` : `${eventLine(ctx, e)}\n`);
      if (e.machine !== '' || !(e.reason in DRAIN_END)) return;
      if (DRAIN_END[e.reason]) finish(0, 'host drained');
      else finish(new CtlError(`the drain was cancelled (${e.reason})`, ExitCode.WaitFailed));
    };
    const handle = (s: AgentSignal) => {
      if (done) return;
      if (s.kind === 'sequenced-event') show(s.event);
      else if (s.kind === 'agent-gone') ctx.io.err('vmkeeperctl: vmkeeperd went away; the drain goes on when it is back\n');
      else if (s.kind === 'disconnected') finish(new CtlError(`lost the D-Bus connection: ${s.reason}`, ExitCode.AgentNotRunning));
    };
    if (ctx.signal.aborted) return onAbort();
    ctx.signal.addEventListener('abort', onAbort, { once: true });
    release(handle);
    if (done) return;
    // No end event among the held ones: the host may have been drained (or undrained) before this call.
    drainState().then((state) => {
      if (state === 'drained') finish(0, 'host drained');
      else if (state === 'none') finish(new CtlError('the host is not draining (undrained meanwhile?)', ExitCode.WaitFailed));
      else if (!ctx.json) ctx.io.out('draining: waiting for every machine to stop\n');
    }, (err: unknown) => finish(err instanceof Error ? err : new Error(String(err))));
  });
}
