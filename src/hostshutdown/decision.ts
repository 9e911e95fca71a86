// What a SIGTERM means. Measured (docs/operations.md): at poweroff/reboot systemd's
// Manager.SystemState is "stopping" by the time our stop job runs, on every route (also
// `systemctl start poweroff.target`, which skips logind); on `systemctl stop/restart` it is
// "running" or "degraded". logind's PrepareForShutdown(true) arrives earlier and only counts as
// a second witness, for when systemd cannot be asked.

export type StopReason = 'host-shutdown' | 'service-stop' | 'bus-lost';
export type GuestAction = 'shutdown' | 'leave';

export interface StopDecisionInput {
  /** org.freedesktop.systemd1.Manager.SystemState, or undefined when it could not be read. */
  systemState: string | undefined;
  /** logind sent PrepareForShutdown(true) and did not take it back. */
  prepareForShutdown: boolean;
  hostShutdownAction: GuestAction;
  onServiceStop: GuestAction;
}

export interface StopDecision {
  reason: StopReason;
  guests: GuestAction;
  /** One line for the journal. */
  why: string;
}

/**
 * The agent lost its D-Bus connection (the bus daemon restarted or died). That says nothing about
 * the host or the operator's intent, so it never touches guests, whatever onServiceStop says.
 */
export const BUS_LOST: StopDecision = { reason: 'bus-lost', guests: 'leave', why: 'lost the D-Bus connection' };

export function decideStop(i: StopDecisionInput): StopDecision {
  let reason: StopReason;
  let why: string;
  if (i.systemState === 'stopping') {
    reason = 'host-shutdown';
    why = 'systemd reports the system as stopping';
  } else if (i.prepareForShutdown) {
    reason = 'host-shutdown';
    why = i.systemState === undefined
      ? 'logind announced a shutdown (systemd could not be asked)'
      : `logind announced a shutdown (systemd says ${i.systemState})`;
  } else if (i.systemState === undefined) {
    reason = 'service-stop';
    why = 'systemd could not be asked and logind announced no shutdown: treating it as a service stop';
  } else {
    reason = 'service-stop';
    why = `the system is ${i.systemState}: only the service stops`;
  }
  const guests = reason === 'host-shutdown' ? i.hostShutdownAction : i.onServiceStop;
  return { reason, guests, why };
}
