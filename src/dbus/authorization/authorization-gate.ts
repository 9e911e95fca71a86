import { createRequire } from 'node:module';
import { Message, type MessageBus } from 'dbus-next';
import type { Logger } from '../../logging/logger.js';
import { describeError } from '../../machine/errors.js';
import { DBUS_ERROR_UNKNOWN_METHOD, toDBusError } from '../errors.js';
import { actionFor } from './actions.js';
import type { CallerAuthorizer } from './caller-authorizer.js';

// Holds each mutating call until the authorizer has answered, then hands it to dbus-next's own
// dispatch; a refused call is answered with the named error and never reaches the service.

/** Message flag: the caller lets the service ask for a password (polkit's AllowUserInteraction). */
const ALLOW_INTERACTIVE_AUTHORIZATION = 0x4;
const NO_REPLY_EXPECTED = 0x1;

export type Dispatch = (msg: Message, bus: MessageBus) => boolean;
const requireDbus = createRequire(import.meta.url);
export const dbusNextDispatch = requireDbus('dbus-next/lib/service/handlers') as Dispatch;

/** A method handler for bus.addMethodHandler: true when it took the call over. */
export type MethodHandler = (msg: Message) => boolean;

export function authorizationGate(bus: MessageBus, authorizer: CallerAuthorizer, logger: Logger, dispatch: Dispatch = dbusNextDispatch): MethodHandler {
  // Calls from one sender are dispatched in the order they arrived, whatever order polkit answers in.
  const tails = new Map<string, Promise<void>>();
  return (msg) => {
    const action = actionFor(msg.interface, msg.member);
    if (!action) return false;
    const sender = msg.sender ?? '';
    const verdict = authorizer.authorize({ sender, action, allowInteraction: ((msg.flags ?? 0) & ALLOW_INTERACTIVE_AUTHORIZATION) !== 0 });
    const turn = (tails.get(sender) ?? Promise.resolve()).then(() =>
      verdict.then(
        () => {
          if (!dispatch(msg, bus)) reply(msg, DBUS_ERROR_UNKNOWN_METHOD, `Method '${msg.member}' on interface '${msg.interface}' does not exist`);
        },
        (err: unknown) => {
          logger.debug('call refused by authorization', { sender, member: `${msg.interface}.${msg.member}`, action, error: describeError(err) });
          const mapped = toDBusError(err);
          reply(msg, mapped.type, mapped.text);
        },
      ),
    );
    tails.set(sender, turn);
    void turn.finally(() => {
      if (tails.get(sender) === turn) tails.delete(sender);
    });
    return true;
  };

  function reply(msg: Message, errorName: string, text: string): void {
    if (((msg.flags ?? 0) & NO_REPLY_EXPECTED) !== 0) return;
    try {
      bus.send(Message.newError(msg as unknown as string, errorName, text));
    } catch (err) {
      logger.warn('could not send an authorization reply', { error: describeError(err) });
    }
  }
}
