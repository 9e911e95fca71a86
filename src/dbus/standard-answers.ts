import { Message, Variant } from 'dbus-next';
import {
  DBUS_ERROR_INVALID_ARGS,
  DBUS_ERROR_PROPERTY_READ_ONLY,
  DBUS_ERROR_UNKNOWN_INTERFACE,
  DBUS_ERROR_UNKNOWN_METHOD,
  DBUS_ERROR_UNKNOWN_OBJECT,
  DBUS_ERROR_UNKNOWN_PROPERTY,
} from './errors.js';
import type { MemberTable } from './interface-support.js';

// Answers the faults of a method call the way sd-bus and GLib services do (docs/dbus-api.md,
// Conventions), before dbus-next's defaults (InvalidArgs "Path not exported", {} for GetAll of
// anything). It only ever answers errors, plus Properties.Get with an empty interface name; every
// well-formed call to a member we export goes on to dbus-next.

const PROPERTIES = 'org.freedesktop.DBus.Properties';
const INTROSPECTABLE = 'org.freedesktop.DBus.Introspectable';
const PEER = 'org.freedesktop.DBus.Peer';

/** The standard interfaces every object answers, with their in-signatures. */
export const STANDARD_METHODS: Record<string, Record<string, string>> = {
  [PROPERTIES]: { Get: 'ss', GetAll: 's', Set: 'ssv' },
  [INTROSPECTABLE]: { Introspect: '' },
  [PEER]: { Ping: '', GetMachineId: '' },
};

/** One exported interface as the answers need it: its members and its current property values. */
export interface ExportedInterface {
  memberTable: MemberTable;
  values: Record<string, unknown>;
}

/** What is exported where: our interfaces on an object, and whether a path has objects below it. */
export interface ObjectDirectory {
  /** The interfaces of the object at `path`, or undefined when no object is exported there. */
  interfacesAt(path: string): Record<string, ExportedInterface> | undefined;
  /** Whether some exported object lies below `path` (an intermediate node that Introspect lists). */
  hasChildren(path: string): boolean;
}

/** The fields of an incoming call the answers read. */
export interface IncomingCall {
  path?: string;
  interface?: string;
  member?: string;
  signature?: string;
  body?: unknown[];
}

export type Answer = { error: string; message: string } | { reply: { signature: string; body: unknown[] } };

/** The answer for `call`, or undefined to let dbus-next handle it. */
export function answerFor(call: IncomingCall, directory: ObjectDirectory): Answer | undefined {
  const path = call.path ?? '';
  const iface = call.interface;
  const member = call.member ?? '';
  const signature = call.signature ?? '';
  // dbus-next dispatches only calls that name their interface; the bus itself refuses an unnamed member.
  if (iface === undefined) return undefined;
  // Peer is answered on every path, as sd-bus and GLib do.
  if (iface === PEER) return checkMember(iface, STANDARD_METHODS[PEER]!, member, signature);
  const interfaces = directory.interfacesAt(path);
  if (!interfaces) {
    if (iface === INTROSPECTABLE && directory.hasChildren(path)) return checkMember(iface, STANDARD_METHODS[iface]!, member, signature);
    return fault(DBUS_ERROR_UNKNOWN_OBJECT, `unknown object ${path}`);
  }
  const standard = STANDARD_METHODS[iface];
  if (standard) {
    const wrong = checkMember(iface, standard, member, signature);
    if (wrong || iface !== PROPERTIES) return wrong;
    return answerProperties(member, call.body ?? [], path, interfaces);
  }
  const table = interfaces[iface]?.memberTable;
  if (!table) return fault(DBUS_ERROR_UNKNOWN_INTERFACE, `unknown interface ${iface} at ${path}`);
  const methods = Object.fromEntries(Object.entries(table.methods).map(([name, m]) => [name, m.in ?? '']));
  return checkMember(iface, methods, member, signature);
}

function fault(error: string, message: string): Answer {
  return { error, message };
}

function checkMember(iface: string, methods: Record<string, string>, member: string, signature: string): Answer | undefined {
  const expected = methods[member];
  if (expected === undefined) return fault(DBUS_ERROR_UNKNOWN_METHOD, `unknown method ${member} on interface ${iface}`);
  if (expected !== signature) {
    return fault(DBUS_ERROR_INVALID_ARGS, `${iface}.${member} takes arguments of signature "${expected}", not "${signature.slice(0, 255)}"`);
  }
  return undefined;
}

function answerProperties(member: string, body: unknown[], path: string, interfaces: Record<string, ExportedInterface>): Answer | undefined {
  const [ifaceName, property] = body as [string, string | undefined];
  if (member === 'GetAll') {
    return ifaceName in interfaces || ifaceName in STANDARD_METHODS ? undefined : fault(DBUS_ERROR_UNKNOWN_INTERFACE, `unknown interface ${ifaceName} at ${path}`);
  }
  // The specification lets Get and Set name no interface: the property is then looked up on all.
  const candidates = ifaceName === '' ? Object.values(interfaces) : [interfaces[ifaceName]];
  if (ifaceName !== '' && !candidates[0]) {
    if (!(ifaceName in STANDARD_METHODS)) return fault(DBUS_ERROR_UNKNOWN_INTERFACE, `unknown interface ${ifaceName} at ${path}`);
    return fault(DBUS_ERROR_UNKNOWN_PROPERTY, `unknown property ${ifaceName}.${property}`);
  }
  const owner = candidates.find((c) => c !== undefined && property! in c.memberTable.properties);
  if (!owner) return fault(DBUS_ERROR_UNKNOWN_PROPERTY, `unknown property ${ifaceName === '' ? '' : `${ifaceName}.`}${property}`);
  // Every vmkeeper property is read-only; dbus-next would assign it.
  if (member === 'Set') return fault(DBUS_ERROR_PROPERTY_READ_ONLY, `property ${property} is read-only`);
  if (ifaceName !== '') return undefined;
  return { reply: { signature: 'v', body: [new Variant(owner.memberTable.properties[property!]!, owner.values[property!])] } };
}

/** A dbus-next method handler that sends the answer, if any, and tells dbus-next it is handled. */
export function standardAnswers(send: (message: Message) => void, directory: ObjectDirectory): (msg: Message) => boolean {
  return (msg) => {
    const answer = answerFor(msg, directory);
    if (!answer) return false;
    if ('error' in answer) send(Message.newError(msg as unknown as string, answer.error, answer.message));
    else send(Message.newMethodReturn(msg, answer.reply.signature, answer.reply.body));
    return true;
  };
}
