import type { HostPlatform, InhibitorLock } from '../../../src/hostshutdown/host-platform.js';
import type { Logger } from '../../../src/logging/logger.js';

/** logind and systemd as the handler sees them, with a system bus connection that can be lost. */
export class FakePlatform implements HostPlatform {
  systemStateValue: string | Error = 'running';
  locksHeld = 0;
  locksTaken = 0;
  inhibitFails = false;
  /** The next this many subscriptions fail (the bus is not back yet). */
  subscribeFailures = 0;
  subscriptions = 0;
  private listener: ((active: boolean) => void) | undefined;
  private lostListener: ((reason: string) => void) | undefined;
  /** A lost connection takes its subscription with it. */
  private subscribed = false;

  /** logind's default InhibitDelayMaxSec is 5 s. */
  inhibitDelayMaxUSecValue: number | Error = 5_000_000;

  async inhibitDelayMaxUSec(): Promise<number> {
    if (this.inhibitDelayMaxUSecValue instanceof Error) throw this.inhibitDelayMaxUSecValue;
    return this.inhibitDelayMaxUSecValue;
  }

  async systemState(): Promise<string> {
    if (this.systemStateValue instanceof Error) throw this.systemStateValue;
    return this.systemStateValue;
  }

  async inhibitShutdown(): Promise<InhibitorLock> {
    if (this.inhibitFails) throw new Error('no logind');
    this.locksHeld++;
    this.locksTaken++;
    let held = true;
    return { kind: 'fd', release: () => held && ((held = false), this.locksHeld--) };
  }

  async onPrepareForShutdown(l: (active: boolean) => void): Promise<void> {
    if (this.subscribeFailures > 0) {
      this.subscribeFailures--;
      throw new Error('AddMatch got no answer within 3000 ms');
    }
    this.listener = l;
    this.subscribed = true;
    this.subscriptions++;
  }

  onConnectionLost(l: (reason: string) => void): void {
    this.lostListener = l;
  }

  close(): void {}

  /** logind broadcasts PrepareForShutdown; only a live subscription hears it. */
  prepare(active: boolean) {
    if (this.subscribed) this.listener!(active);
  }

  loseConnection() {
    this.subscribed = false;
    this.lostListener?.('the bus closed the connection');
  }
}

/** A logger that keeps "LEVEL message" lines for assertions. */
export function capturingLogger(): Logger & { lines: string[] } {
  const lines: string[] = [];
  const at = (level: string) => (m: string) => void lines.push(`${level} ${m}`);
  return { lines, error: at('error'), warn: at('warn'), info: at('info'), debug: at('debug') };
}
