import type { MachineApi } from '../../src/service/api.js';

// Probes on a real MachineApi for the D-Bus edge tests: the edge is tested against the real
// service, and these only watch or interrupt the calls it makes, never answer in its place.

type ApiMethod = 'create' | 'get' | 'list' | 'delete' | 'setPower' | 'setAnnotations' | 'events';

/** The next call of `method` throws `error` (any value: AgentError, Error with a stack, string); later calls go through. */
export function failNextCall(api: MachineApi, method: ApiMethod, error: unknown): void {
  const original = api[method];
  (api as unknown as Record<ApiMethod, unknown>)[method] = () => {
    api[method] = original as never;
    throw error;
  };
}

/** Counts the listeners subscribed through api.on and not yet taken off: what a client left behind. */
export function countSubscriptions(api: MachineApi): () => number {
  const live = new Map<unknown, Set<unknown>>();
  const on = api.on.bind(api);
  const off = api.off.bind(api);
  api.on = ((event, listener) => {
    if (!live.has(event)) live.set(event, new Set());
    live.get(event)!.add(listener);
    on(event, listener);
  }) as MachineApi['on'];
  api.off = ((event, listener) => {
    live.get(event)?.delete(listener);
    off(event, listener);
  }) as MachineApi['off'];
  return () => [...live.values()].reduce((n, listeners) => n + listeners.size, 0);
}
