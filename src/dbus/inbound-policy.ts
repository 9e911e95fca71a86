import { DBUS_ERROR_INVALID_ARGS, DBUS_ERROR_LIMITS_EXCEEDED } from './errors.js';
import type { InboundJudge } from './inbound-filter.js';
import type { MemberTable } from './interface-support.js';
import { STANDARD_METHODS } from './standard-answers.js';

// Which incoming calls the agent refuses before decoding their bodies (docs/dbus-api.md, Limits).

/**
 * The largest body any of our methods needs: a 64 KiB spec or 64 KiB of annotations, plus names
 * and framing. Anything larger is refused whatever it is addressed to.
 */
export const MAX_INBOUND_BODY_BYTES = 128 * 1024;

const PEER = 'org.freedesktop.DBus.Peer';

/** interface -> method -> in-signature, from our member tables and the standard interfaces. */
export function methodSignatures(tables: Record<string, MemberTable>): Map<string, Map<string, string>> {
  const out = new Map<string, Map<string, string>>();
  for (const [iface, methods] of Object.entries(STANDARD_METHODS)) out.set(iface, new Map(Object.entries(methods)));
  for (const [iface, table] of Object.entries(tables)) {
    out.set(iface, new Map(Object.entries(table.methods).map(([name, m]) => [name, m.in ?? ''])));
  }
  return out;
}

/**
 * Refuses bodies over the limit (LimitsExceeded) and calls to a known method with another
 * signature (InvalidArgs). Calls to members or objects it does not know pass: standard-answers.ts
 * answers them, and the size limit already bounds what decoding them costs.
 */
export function inboundJudge(
  signatures: Map<string, Map<string, string>>,
  maxBodyBytes = MAX_INBOUND_BODY_BYTES,
  /** Whether a path's object has the interface; a call elsewhere passes, to be answered UnknownObject or UnknownInterface. */
  exported: (path: string, iface: string) => boolean = () => true,
): InboundJudge {
  return (call) => {
    if (call.bodyBytes > maxBodyBytes) {
      return { errorName: DBUS_ERROR_LIMITS_EXCEEDED, message: `message body of ${call.bodyBytes} bytes exceeds the agent's limit of ${maxBodyBytes} bytes` };
    }
    const expected = call.interface !== undefined && call.member !== undefined ? signatures.get(call.interface)?.get(call.member) : undefined;
    if (expected !== undefined && expected !== call.signature && (call.interface === PEER || exported(call.path ?? '', call.interface!))) {
      return {
        errorName: DBUS_ERROR_INVALID_ARGS,
        message: `${call.interface}.${call.member} takes arguments of signature "${expected}", not "${call.signature.slice(0, 255)}"`,
      };
    }
    return undefined;
  };
}
