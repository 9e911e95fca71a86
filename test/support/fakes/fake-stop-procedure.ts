import type { ShutdownRecord, StopProcedure, StopRunOptions } from '../../../src/hostshutdown/stop-procedure.js';
import { deferred } from '../deferred.js';

/** One run the test finishes by hand; an abort ends it at once as "cancelled", as the real one does. */
export interface FakeRun {
  options: StopRunOptions;
  finish(machines?: ShutdownRecord['machines']): void;
  fail(err: Error): void;
}

export class FakeStopProcedure implements StopProcedure {
  readonly runs: FakeRun[] = [];
  private counter = 0;

  constructor(private readonly log: string[] = []) {}

  run(options: StopRunOptions): Promise<ShutdownRecord> {
    this.log.push(`run ${options.kind}`);
    const d = deferred<ShutdownRecord>();
    const id = `20261205T080000Z-${++this.counter}`;
    const record = (result: ShutdownRecord['result'], machines: ShutdownRecord['machines'] = []): ShutdownRecord => ({
      id, kind: options.kind, result, startedAt: 1, finishedAt: 2, boundSec: 60, groups: [], machines,
    });
    options.signal?.addEventListener('abort', () => d.resolve(record('cancelled')), { once: true });
    this.runs.push({ options, finish: (machines) => d.resolve(record('completed', machines)), fail: (err) => d.reject(err) });
    return d.promise;
  }
}

export const machineResult = (machine: string, result: ShutdownRecord['machines'][number]['result']): ShutdownRecord['machines'][number] => ({
  machine, domain: `vmk-${machine}`, action: 'shutdown', priority: 0, group: 0, result, afterMs: 10, detail: '',
});
