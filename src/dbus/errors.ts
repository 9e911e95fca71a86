import { DBusError } from 'dbus-next';
import { AgentError, ERROR_PREFIX, describeError } from '../machine/errors.js';

// The single place where agent failures become D-Bus errors: callers get a name and one line.

export const DBUS_ERROR_FAILED = 'org.freedesktop.DBus.Error.Failed';
export const DBUS_ERROR_PROPERTY_READ_ONLY = 'org.freedesktop.DBus.Error.PropertyReadOnly';
export const DBUS_ERROR_UNKNOWN_PROPERTY = 'org.freedesktop.DBus.Error.UnknownProperty';
export const DBUS_ERROR_UNKNOWN_INTERFACE = 'org.freedesktop.DBus.Error.UnknownInterface';
export const DBUS_ERROR_INVALID_ARGS = 'org.freedesktop.DBus.Error.InvalidArgs';
export const DBUS_ERROR_UNKNOWN_METHOD = 'org.freedesktop.DBus.Error.UnknownMethod';
export const DBUS_ERROR_UNKNOWN_OBJECT = 'org.freedesktop.DBus.Error.UnknownObject';
export const DBUS_ERROR_LIMITS_EXCEEDED = 'org.freedesktop.DBus.Error.LimitsExceeded';
/** A reply the agent could not encode (docs/dbus-api.md): the caller is told instead of left waiting. */
export const DBUS_ERROR_INTERNAL = `${ERROR_PREFIX}InternalError`;

const MAX_MESSAGE = 1000;

function oneLine(err: unknown): string {
  const line = describeError(err);
  return line.length > MAX_MESSAGE ? `${line.slice(0, MAX_MESSAGE)}...` : line;
}

export function toDBusError(err: unknown): DBusError {
  if (err instanceof AgentError) return new DBusError(err.dbusName, oneLine(err));
  // A DBusError raised on purpose (e.g. by dbus-next) keeps its name but loses any extra lines.
  if (err instanceof DBusError) return new DBusError(err.type, oneLine(err.text));
  return new DBusError(DBUS_ERROR_FAILED, oneLine(err));
}

/** Runs a handler body and rethrows any failure as a mapped DBusError (dbus-next sends its name). */
export async function mapErrors<T>(body: () => T | Promise<T>): Promise<T> {
  try {
    return await body();
  } catch (err) {
    throw toDBusError(err);
  }
}
