import { AgentError } from '../machine/errors.js';
import { validateMachineName } from '../machine/names.js';
import type { AgentEvent, CallOptions, EventPage } from '../service/api.js';
import type { CallerIdentity } from './caller-identity.js';
import { mapErrors } from './errors.js';
import { usec } from './interface-support.js';

// The Manager's members for tools that resume and compare-and-set (docs/dbus-api.md, "Event
// journal" and "Optimistic concurrency"): the wire shapes and the caller capture they share.

/** At most this many events per ListEventsSince page. */
export const MAX_EVENTS_PAGE = 500;

export type SequencedEventBody = [bigint, bigint, string, string, string, string, string, string];

/** sequence, timestamp, machine, type, reason, message, uid ("" = the agent), call ("" = the agent). */
export function sequencedEventBody(e: AgentEvent): SequencedEventBody {
  return [BigInt(e.sequence), usec(e.timestamp), e.machine, e.type, e.reason, e.message, e.actor ? String(e.actor.uid) : '', e.actor?.call ?? ''];
}

export function eventPageBody(page: EventPage): [SequencedEventBody[], bigint] {
  return [page.events.map(sequencedEventBody), BigInt(page.next)];
}

function asNumber(value: bigint | number, what: string): number {
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < 0) throw new AgentError('InvalidArgument', `${what} must be a non-negative integer below 2^53`);
  return n;
}

/** "" = every machine; anything else must be a machine name. */
export function machineFilter(machine: string): string | undefined {
  if (machine === '') return undefined;
  validateMachineName(machine);
  return machine;
}

export function cursorOf(after: bigint | number): number {
  return asNumber(after, 'the cursor');
}

/**
 * Runs a mutating call as its D-Bus caller: the sender is captured now, while dbus-next is still
 * dispatching this message; its uid is asked of the bus before the body runs.
 */
export function asCaller<T>(callers: CallerIdentity | undefined, body: (options: CallOptions) => T | Promise<T>, expected?: bigint | number): Promise<T> {
  const call = callers?.currentCall();
  return mapErrors(async () => {
    const expectedVersion = expected === undefined ? undefined : asNumber(expected, 'the expected version');
    return body({ actor: await callers?.actorOf(call), expectedVersion });
  });
}

export const JOURNAL_METHODS = {
  ListEventsSince: { in: 'ts', out: 'a(ttssssss)t', args: ['after', 'machine', 'events', 'next'] },
  SetMachineAnnotationsIfVersion: { in: 'sa{ss}t', args: ['name', 'annotations', 'expected'] },
  SetMachinePowerIfVersion: { in: 'sst', args: ['name', 'power', 'expected'] },
  DeleteMachineIfVersion: { in: 'st', args: ['name', 'expected'] },
};

export const JOURNAL_SIGNALS = {
  EventRecorded: { signature: 'ttssssss', args: ['sequence', 'timestamp', 'name', 'type', 'reason', 'message', 'uid', 'call'] },
};
