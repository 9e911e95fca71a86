// A tiny typed event emitter: listeners that throw are isolated so one bad subscriber cannot stop
// the others (or the component that emits).

type Listener = (...args: never[]) => void;

export class TypedEmitter<Events extends { [K in keyof Events]: Listener }> {
  private listeners = new Map<keyof Events, Set<Listener>>();

  constructor(private readonly onListenerError: (err: unknown) => void = () => {}) {}

  on<E extends keyof Events>(event: E, listener: Events[E]): void {
    let set = this.listeners.get(event);
    if (!set) this.listeners.set(event, (set = new Set()));
    set.add(listener);
  }

  off<E extends keyof Events>(event: E, listener: Events[E]): void {
    this.listeners.get(event)?.delete(listener);
  }

  emit<E extends keyof Events>(event: E, ...args: Parameters<Events[E]>): void {
    // A copy: a listener added while this event is delivered waits for the next one (as in Node).
    for (const listener of [...(this.listeners.get(event) ?? [])]) {
      try {
        (listener as (...a: Parameters<Events[E]>) => void)(...args);
      } catch (err) {
        this.onListenerError(err);
      }
    }
  }
}
