import type { MessageBus } from 'dbus-next';
import type { Clock } from '../../lifecycle/clock.js';
import type { Logger } from '../../logging/logger.js';
import { PolkitAuthorizer, type AuthorizationMode, type CallerAuthorizer } from './caller-authorizer.js';
import { BusPolkitClient } from './polkit-authority.js';

// polkit answers a non-interactive check in milliseconds; a person typing a password needs minutes.
const POLKIT_TIMEOUT_MS = 25_000;
const POLKIT_INTERACTIVE_TIMEOUT_MS = 120_000;

/** The authorizer for the config's `authorization` mode, asking polkit on the agent's own bus. */
export function buildAuthorizer(mode: AuthorizationMode, bus: MessageBus, clock: Clock, logger: Logger): CallerAuthorizer {
  const polkit = new BusPolkitClient({ bus, clock, timeoutMs: POLKIT_TIMEOUT_MS, interactiveTimeoutMs: POLKIT_INTERACTIVE_TIMEOUT_MS });
  return new PolkitAuthorizer({ mode, polkit, logger, clock });
}
