import type { Clock } from '../../lifecycle/clock.js';
import { Semaphore } from '../../lifecycle/semaphore.js';
import { withTimeout } from '../../lifecycle/with-timeout.js';
import { AgentError } from '../../machine/errors.js';

// A hung libvirtd never answers: every native call races a timer on the injected clock, so a
// caller always gets an answer and tests can step time instead of sleeping. The wait for a free
// call slot is bounded separately: a long queue says the agent is busy, not that libvirtd hangs.

/** libvirt took longer than the limit to answer a call it was given: the connection is suspect. */
export class CallTimeoutError extends AgentError {
  constructor(readonly op: string, readonly timeoutMs: number) {
    super('HypervisorUnavailable', `libvirt call ${op} timed out after ${timeoutMs} ms`);
  }
}

/** The call never reached libvirt: every slot stayed busy past the limit. Says nothing about the connection. */
export class CallQueueTimeoutError extends AgentError {
  constructor(readonly op: string, readonly waitedMs: number, readonly slots: number) {
    super('HypervisorUnavailable', `libvirt call ${op} not issued: all ${slots} call slots stayed busy for ${waitedMs} ms`);
  }
}

/** Settles like call, or rejects with CallTimeoutError after timeoutMs (the call itself is abandoned). */
export function withCallTimeout<T>(clock: Clock, timeoutMs: number, op: string, call: () => Promise<T>): Promise<T> {
  return withTimeout(clock, timeoutMs, call, () => new CallTimeoutError(op, timeoutMs));
}

export interface BoundedCallsOptions {
  clock: Clock;
  /** Native calls in flight at once. */
  slots: number;
  /** Limit for libvirt's answer, counted from the moment the call is issued. */
  callTimeoutMs: number;
  /** Limit for the wait for a free slot before the call is issued. */
  queueTimeoutMs: number;
}

/**
 * Native calls through a fixed number of slots, each with two separate limits: the queue wait
 * (CallQueueTimeoutError) and libvirt's answer (CallTimeoutError). A call that timed out keeps its
 * slot until it really returns, and is counted in `stuck` until then.
 */
export class BoundedCalls {
  private readonly slots: Semaphore;
  private stuckCalls = 0;

  constructor(private readonly o: BoundedCallsOptions) {
    this.slots = new Semaphore(o.slots);
  }

  /** Calls that timed out and have not returned: each still holds a slot (a libuv pool thread). */
  get stuck(): number {
    return this.stuckCalls;
  }

  /** timeoutMs: this call's own limit for libvirt's answer (a save), instead of callTimeoutMs. */
  run<T>(op: string, call: () => Promise<T>, timeoutMs?: number): Promise<T> {
    const { clock, queueTimeoutMs } = this.o;
    const callTimeoutMs = timeoutMs ?? this.o.callTimeoutMs;
    // Boxed: a promise resolved with a bare promise would wait for it.
    const issued = new Promise<{ answer: Promise<T> }>((resolve, reject) => {
      let gaveUp = false;
      const queueDeadline = clock.setTimer(queueTimeoutMs, () => {
        gaveUp = true;
        reject(new CallQueueTimeoutError(op, queueTimeoutMs, this.o.slots));
      });
      // The slot is held until the native call settles, not until we stop waiting for it; a call
      // whose caller gave up in the queue is never issued and hands its slot on at once.
      void this.slots.run(() => {
        if (gaveUp) return Promise.resolve();
        queueDeadline.cancel();
        const answer = attempt(call);
        resolve({ answer });
        return answer.then(ignore, ignore);
      });
    });
    // libvirt's own limit starts here, when the call is issued.
    return issued.then(({ answer }) => withCallTimeout(clock, callTimeoutMs, op, () => answer).catch((err: unknown) => {
      if (err instanceof CallTimeoutError) this.park(answer);
      throw err;
    }));
  }

  /** Counts a timed-out call until it finally settles. */
  private park(pending: Promise<unknown>): void {
    this.stuckCalls++;
    const settled = () => void this.stuckCalls--;
    pending.then(settled, settled);
  }
}

const ignore = () => undefined;

/** The call's promise, or a rejected one when it throws before returning one. */
function attempt<T>(call: () => Promise<T>): Promise<T> {
  try {
    return call();
  } catch (err) {
    return Promise.reject(err);
  }
}
