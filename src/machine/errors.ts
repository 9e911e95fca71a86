// One error family for the whole agent. Each kind carries the D-Bus error name it maps to at the
// edge, so no layer below dbus/ needs to know about D-Bus and no caller ever sees a stack trace.

export const ERROR_PREFIX = 'org.vmkeeper1.Error.';

export type AgentErrorKind =
  | 'NoSuchMachine'
  | 'MachineExists'
  | 'InvalidName'
  | 'InvalidSpec'
  | 'MachineTerminating'
  | 'ShuttingDown'
  | 'HypervisorUnavailable'
  | 'StorageFailure'
  | 'NotSupported'
  | 'InvalidArgument'
  | 'Conflict'
  | 'EventsExpired'
  | 'AccessDenied'
  | 'NoSuchShutdownRecord';

export class AgentError extends Error {
  readonly kind: AgentErrorKind;

  constructor(kind: AgentErrorKind, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.kind = kind;
    this.name = `AgentError(${kind})`;
  }

  get dbusName(): string {
    // Kinds outside the contract's list use the standard freedesktop names callers already know.
    if (this.kind === 'InvalidArgument') return 'org.freedesktop.DBus.Error.InvalidArgs';
    if (this.kind === 'NotSupported') return 'org.freedesktop.DBus.Error.NotSupported';
    // The same name the bus policy answers with, so callers handle one denial whichever gate refused.
    if (this.kind === 'AccessDenied') return 'org.freedesktop.DBus.Error.AccessDenied';
    return ERROR_PREFIX + this.kind;
  }
}

export const noSuchMachine = (name: string) => new AgentError('NoSuchMachine', `no machine named "${name}"`);
export const machineExists = (name: string) => new AgentError('MachineExists', `a machine named "${name}" already exists`);
export const invalidSpec = (field: string, why: string) => new AgentError('InvalidSpec', `spec field "${field}": ${why}`);
export const machineTerminating = (name: string) =>
  new AgentError('MachineTerminating', `machine "${name}" is being deleted`);
export const conflict = (name: string, current: number, expected: number) =>
  new AgentError('Conflict', `machine "${name}" is at version ${current}, not the expected ${expected}`);
export const noSuchShutdownRecord = (id: string) =>
  new AgentError('NoSuchShutdownRecord', `no shutdown record with id ${JSON.stringify(id.length > 64 ? `${id.slice(0, 64)}...` : id)}`);
export const shuttingDown = () => new AgentError('ShuttingDown', 'the agent is shutting down and accepts no new work');

export function isAgentError(err: unknown, kind?: AgentErrorKind): err is AgentError {
  return err instanceof AgentError && (kind === undefined || err.kind === kind);
}

/** A one-line description of any thrown value, for logs and D-Bus replies. */
export function describeError(err: unknown): string {
  const text = err instanceof Error ? err.message : String(err);
  return text.split('\n')[0]!.trim() || 'unknown error';
}
