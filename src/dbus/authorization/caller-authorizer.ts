import type { Clock } from '../../lifecycle/clock.js';
import type { Logger } from '../../logging/logger.js';
import { AgentError, describeError } from '../../machine/errors.js';
import type { AuthorizationQuery, PolkitClient } from './polkit-authority.js';

// Decides whether a caller may make a mutating call. The bus policy (config/org.vmkeeper1.conf,
// by default root and group vmkeeper) decides who reaches us at all; polkit, when used, per action.

export type AuthorizationMode = 'auto' | 'polkit' | 'bus-policy';

export interface CallerAuthorizer {
  /** Resolves when allowed; rejects with AgentError(AccessDenied) naming the action otherwise. */
  authorize(query: AuthorizationQuery): Promise<void>;
}

export interface PolkitAuthorizerOptions {
  mode: AuthorizationMode;
  polkit: PolkitClient;
  logger: Logger;
  clock: Clock;
  /** In "auto", how long "polkit is absent" is believed before the bus is asked again. */
  reprobeMs?: number;
}

const DEFAULT_REPROBE_MS = 60_000;

export class PolkitAuthorizer implements CallerAuthorizer {
  private absentUntil = 0;
  private knownPresent = false;
  private probe: Promise<boolean> | undefined;
  private toldBusPolicy = false;

  constructor(private readonly o: PolkitAuthorizerOptions) {}

  async authorize(query: AuthorizationQuery): Promise<void> {
    if (this.o.mode === 'bus-policy') return this.relyOnBusPolicy('authorization is set to "bus-policy"');
    if (this.o.mode === 'auto' && !(await this.polkitPresent(query))) return this.relyOnBusPolicy('polkit (org.freedesktop.PolicyKit1) is not on the bus');
    let verdict;
    try {
      verdict = await this.o.polkit.check(query);
    } catch (err) {
      // In "auto", polkit stopping (not failing) hands the calls back to the bus policy.
      if (this.o.mode === 'auto' && !(await this.stillPresent(query))) return this.relyOnBusPolicy('polkit (org.freedesktop.PolicyKit1) left the bus');
      this.o.logger.warn('polkit check failed: call refused', { action: query.action, sender: query.sender, error: describeError(err) });
      throw new AgentError('AccessDenied', `cannot check authorization for ${query.action} with polkit, refused: ${describeError(err)}`, { cause: err });
    }
    if (verdict.authorized) return;
    throw new AgentError(
      'AccessDenied',
      verdict.challenge
        ? `not authorized for ${query.action}: polkit requires authentication (call with interactive authorization allowed, or ask an administrator for a rule)`
        : `not authorized for ${query.action}`,
    );
  }

  /** Probes once at a time; "present" is believed until a check fails, "absent" for reprobeMs. */
  private async polkitPresent(query: AuthorizationQuery): Promise<boolean> {
    if (this.knownPresent) return true;
    if (this.o.clock.now() < this.absentUntil) return false;
    this.probe ??= this.o.polkit.present().finally(() => (this.probe = undefined));
    let present: boolean;
    try {
      present = await this.probe;
    } catch (err) {
      throw new AgentError('AccessDenied', `cannot check authorization for ${query.action}, refused: ${describeError(err)}`, { cause: err });
    }
    if (present) {
      this.knownPresent = true;
      this.toldBusPolicy = false; // a later fallback is news again
    } else this.absentUntil = this.o.clock.now() + (this.o.reprobeMs ?? DEFAULT_REPROBE_MS);
    return present;
  }

  private stillPresent(query: AuthorizationQuery): Promise<boolean> {
    this.knownPresent = false;
    return this.polkitPresent(query);
  }

  private relyOnBusPolicy(why: string): void {
    if (this.toldBusPolicy) return;
    this.toldBusPolicy = true;
    this.o.logger.info(`${why}: mutating calls are guarded by the D-Bus policy alone (root and group vmkeeper)`);
  }
}
