import type { AgentSignal, Subscription, VmkeeperClient } from './model.js';

// Subscribe before a call, handle after it: what arrives in between (the call's own signals, an
// event that ListEvents also returns) is held and replayed, in order, once the caller has its snapshot.

export interface HeldSignals extends Subscription {
  /** Replays the held signals to `handler`, then passes every new one straight to it. */
  release(handler: (signal: AgentSignal) => void): void;
}

/** Resolves once the client delivers signals (so nothing after this point is missed). */
export async function holdSignals(client: VmkeeperClient): Promise<HeldSignals> {
  const held: AgentSignal[] = [];
  let live: ((signal: AgentSignal) => void) | undefined;
  const subscription = await client.subscribe((s) => (live ? live(s) : held.push(s)));
  return {
    release(handler) {
      while (held.length > 0) handler(held.shift()!);
      live = handler;
    },
    close: () => subscription.close(),
  };
}
