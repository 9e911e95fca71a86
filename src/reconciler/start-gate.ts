import { TypedEmitter } from '../lifecycle/emitter.js';

// The one switch that keeps the reconciler from starting guests: a drain for maintenance holds
// it (machines keep power "on" in their records, so an undrain or the next boot brings them back),
// and releasing it lets the reconciler start them again, in its start order. Held or not is
// decided by the drain's owner, which persists it; this object only carries the current value.

export interface StartGateEvents {
  changed: (held: boolean) => void;
}

export class StartGate {
  private heldBecause: string | undefined;
  readonly emitter = new TypedEmitter<StartGateEvents>();

  get held(): boolean {
    return this.heldBecause !== undefined;
  }

  /** Why starts are held (shown in a machine's Message), or undefined when they are not. */
  get reason(): string | undefined {
    return this.heldBecause;
  }

  hold(reason: string): void {
    const was = this.held;
    this.heldBecause = reason;
    if (!was) this.emitter.emit('changed', true);
  }

  release(): void {
    if (!this.held) return;
    this.heldBecause = undefined;
    this.emitter.emit('changed', false);
  }
}
