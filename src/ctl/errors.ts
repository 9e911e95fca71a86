import { ERROR_PREFIX as VMKEEPER } from '../machine/errors.js';

// Every failure the CLI reports becomes a CtlError: one line for the operator, one exit code per class.

export const ExitCode = {
  Ok: 0,
  Failure: 1,
  Usage: 2,
  NoSuchMachine: 3,
  InvalidInput: 4,
  AccessDenied: 5,
  AgentNotRunning: 6,
  Conflict: 7,
  WaitFailed: 8,
  Interrupted: 130,
} as const;

export class CtlError extends Error {
  constructor(message: string, readonly exitCode: number) {
    super(message);
    this.name = 'CtlError';
  }
}

/** Bad command line; `command` names the command whose --help to point at. */
export class UsageError extends CtlError {
  constructor(message: string, readonly command?: string) {
    super(message, ExitCode.Usage);
    this.name = 'UsageError';
  }
}

const FDO = 'org.freedesktop.DBus.Error.';

/** D-Bus error name -> exit code and a one-line message (the agent's own text where it is one). */
export function fromDBusError(name: string, text: string): CtlError {
  const line = firstLine(text);
  switch (name) {
    case `${VMKEEPER}NoSuchMachine`:
      return new CtlError(line || 'no such machine', ExitCode.NoSuchMachine);
    case `${VMKEEPER}NoSuchShutdownRecord`:
      return new CtlError(line || 'no such shutdown record', ExitCode.NoSuchMachine);
    case `${VMKEEPER}InvalidName`:
      return new CtlError(`invalid name: ${line}`, ExitCode.InvalidInput);
    case `${VMKEEPER}InvalidSpec`:
      return new CtlError(`invalid spec: ${line}`, ExitCode.InvalidInput);
    case `${FDO}InvalidArgs`:
      return new CtlError(`invalid argument: ${line}`, ExitCode.InvalidInput);
    case `${VMKEEPER}Conflict`:
    case `${VMKEEPER}MachineExists`:
    case `${VMKEEPER}MachineTerminating`:
    case `${VMKEEPER}ShuttingDown`:
      return new CtlError(line, ExitCode.Conflict);
    case `${VMKEEPER}EventsExpired`:
      return new CtlError(`events expired: ${line}`, ExitCode.InvalidInput);
    case `${VMKEEPER}HypervisorUnavailable`:
      return new CtlError(`hypervisor unavailable: ${line}`, ExitCode.Failure);
    case `${VMKEEPER}StorageFailure`:
      return new CtlError(`storage failure (nothing was changed): ${line}`, ExitCode.Failure);
    case `${FDO}NotSupported`:
    case `${FDO}UnknownMethod`:
      return new CtlError(`not supported by this vmkeeperd: ${line}`, ExitCode.Failure);
    case `${FDO}AccessDenied`:
      // The agent's refusal (polkit) names the action; the bus's own names only the rule and the member.
      if (/authoriz\w* for org\.vmkeeper1\./.test(line)) return new CtlError(`access denied by polkit: ${line}`, ExitCode.AccessDenied);
      return new CtlError(
        'access denied: changing machines needs root or membership in the vmkeeper group',
        ExitCode.AccessDenied,
      );
    case `${FDO}ServiceUnknown`:
    case `${FDO}NameHasNoOwner`:
      return new CtlError('vmkeeperd is not running (nobody owns org.vmkeeper1 on this bus)', ExitCode.AgentNotRunning);
    case `${FDO}NoReply`:
    case `${FDO}Timeout`:
    case `${FDO}TimedOut`:
      return new CtlError('vmkeeperd did not answer in time', ExitCode.Failure);
    case `${FDO}Disconnected`:
      return new CtlError('lost the connection to the bus', ExitCode.AgentNotRunning);
    default:
      return new CtlError(line || name, ExitCode.Failure);
  }
}

/** Anything thrown -> CtlError; D-Bus errors are recognised by their `type` (dbus-next's DBusError). */
export function toCtlError(err: unknown): CtlError {
  if (err instanceof CtlError) return err;
  if (isDBusErrorLike(err)) return fromDBusError(err.type, err.text ?? '');
  const text = err instanceof Error ? err.message : String(err);
  return new CtlError(firstLine(text) || 'unknown error', ExitCode.Failure);
}

function isDBusErrorLike(err: unknown): err is { type: string; text?: string } {
  return (
    typeof err === 'object' && err !== null && typeof (err as { type?: unknown }).type === 'string' &&
    /^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$/.test((err as { type: string }).type)
  );
}

export function firstLine(text: string): string {
  return (text.split('\n')[0] ?? '').trim();
}
