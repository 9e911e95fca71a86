import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { DrainController, DRAIN_REASON, type AgentStateSource } from '../../../src/drain/drain-controller.js';
import { DrainStateFile } from '../../../src/drain/drain-state-file.js';
import { TypedEmitter } from '../../../src/lifecycle/emitter.js';
import { silentLogger } from '../../../src/logging/logger.js';
import { isAgentError } from '../../../src/machine/errors.js';
import { drainStateFile } from '../../../src/machine/paths.js';
import { StartGate } from '../../../src/reconciler/start-gate.js';
import type { AgentState } from '../../../src/service/api.js';
import { nodeStoreFs, type StoreFs } from '../../../src/store/store-fs.js';
import { FakeClock } from '../../support/fakes/fake-clock.js';
import { waitFor } from '../../support/wait.js';
import { FakeStopProcedure, machineResult } from '../../support/fakes/fake-stop-procedure.js';

class FakeAgentState implements AgentStateSource {
  private readonly emitter = new TypedEmitter<{ infoChanged: (info: { state: AgentState }) => void }>();
  constructor(public state: AgentState = 'running') {}
  info() {
    return { state: this.state };
  }
  on(event: 'infoChanged', listener: (info: { state: AgentState }) => void): void {
    this.emitter.on(event, listener);
  }
  set(state: AgentState): void {
    this.state = state;
    this.emitter.emit('infoChanged', { state });
  }
}

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'vmk-drain-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** A log shared by the file system, the gate and the stop procedure: what happened in which order. */
function setup(o: { agentState?: AgentState; fs?: StoreFs } = {}) {
  const log: string[] = [];
  const loggingFs: StoreFs = {
    ...(o.fs ?? nodeStoreFs),
    rename: async (from, to) => {
      await (o.fs ?? nodeStoreFs).rename(from, to);
      log.push(`persist ${path.basename(to)}`);
    },
    unlink: async (p) => {
      await (o.fs ?? nodeStoreFs).unlink(p);
      if (!p.endsWith('.tmp')) log.push(`remove ${path.basename(p)}`);
    },
  };
  const gate = new StartGate();
  gate.emitter.on('changed', (held) => log.push(held ? 'gate held' : 'gate released'));
  const stop = new FakeStopProcedure(log);
  const agent = new FakeAgentState(o.agentState);
  const events: Array<{ type: string; reason: string; message: string; uid?: number }> = [];
  const build = () => {
    const c = new DrainController({
      file: new DrainStateFile(drainStateFile(dir), loggingFs),
      gate,
      stopProcedure: stop,
      events: {
        record: (type, reason, message, actor) => {
          events.push({ type, reason, message, ...(actor ? { uid: actor.uid } : {}) });
          log.push(`event ${reason}`);
        },
        flushed: async () => undefined,
      },
      agent,
      clock: new FakeClock(),
      logger: silentLogger,
    });
    c.emitter.on('changed', (s) => log.push(`state ${s}`));
    return c;
  };
  return { log, gate, stop, agent, events, build, controller: build() };
}

const persisted = async () => JSON.parse(await readFile(drainStateFile(dir), 'utf8')) as { state: string };
const exists = async () => readFile(drainStateFile(dir)).then(() => true, () => false);

describe('Drain', () => {
  it('persists the drain before it holds the gate and starts the run, then completes', async () => {
    const t = setup();
    await t.controller.drain({ uid: 1000, call: 'Drain' });
    expect(t.log).toEqual(['persist drain.json', 'gate held', 'state draining', 'event DrainStarted', 'run drain']);
    expect(t.controller.state).toBe('draining');
    expect(t.gate.reason).toBe(DRAIN_REASON);
    expect((await persisted()).state).toBe('draining');
    expect(t.stop.runs[0]!.options.kind).toBe('drain');

    t.stop.runs[0]!.finish([machineResult('a', 'clean'), machineResult('b', 'saved')]);
    await waitFor(() => t.controller.state === 'drained', { timeoutMs: 2000 });
    expect((await persisted()).state).toBe('drained');
    expect(t.events.map((e) => e.reason)).toEqual(['DrainStarted', 'DrainCompleted']);
    expect(t.events[0]!.uid).toBe(1000);
    expect(t.events[1]).toMatchObject({ type: 'normal', message: expect.stringContaining('1 clean, 1 saved') });
    expect(t.gate.held).toBe(true);
  });

  it.each([
    ['failed', 'warning'],
    ['left-running', 'warning'],
    ['forced', 'normal'],
  ] as const)('a run with a %s machine completes as a %s event', async (result, type) => {
    const t = setup();
    await t.controller.drain();
    t.stop.runs[0]!.finish([machineResult('a', result)]);
    await waitFor(() => t.controller.state === 'drained', { timeoutMs: 2000 });
    expect(t.events.at(-1)).toMatchObject({ reason: 'DrainCompleted', type });
  });

  it.each(['draining', 'drained'] as const)('a second Drain while %s changes nothing', async (state) => {
    const t = setup();
    await t.controller.drain();
    if (state === 'drained') {
      t.stop.runs[0]!.finish();
      await waitFor(() => t.controller.state === 'drained', { timeoutMs: 2000 });
    }
    const before = [...t.log];
    await t.controller.drain();
    expect(t.log).toEqual(before);
    expect(t.stop.runs).toHaveLength(1);
  });

  it.each(['host-shutdown', 'stopping'] as const)('during %s answers ShuttingDown and changes nothing', async (agentState) => {
    const t = setup({ agentState });
    const err = await t.controller.drain().catch((e: unknown) => e);
    expect(isAgentError(err, 'ShuttingDown')).toBe(true);
    expect(t.log).toEqual([]);
    expect(await exists()).toBe(false);
  });

  it('a drain file that cannot be written is StorageFailure: no gate, no run, no event', async () => {
    const t = setup({ fs: { ...nodeStoreFs, fsync: async () => { throw Object.assign(new Error('EIO: i/o error'), { code: 'EIO' }); } } });
    const err = await t.controller.drain().catch((e: unknown) => e);
    expect(isAgentError(err, 'StorageFailure')).toBe(true);
    expect(t.log).toEqual([]);
    expect(t.controller.state).toBe('none');
    expect(await exists()).toBe(false);
  });

  it('asked while the agent is starting, the run waits until libvirt is watched', async () => {
    const t = setup({ agentState: 'starting' });
    await t.controller.drain();
    expect(t.controller.state).toBe('draining');
    expect(t.gate.held).toBe(true);
    expect(t.stop.runs).toHaveLength(0);
    t.agent.set('running');
    await waitFor(() => t.stop.runs.length === 1, { timeoutMs: 2000 });
  });

  it('a failed run keeps the host draining; Drain again runs it again', async () => {
    const t = setup();
    await t.controller.drain();
    t.stop.runs[0]!.fail(new Error('libvirt went away'));
    await waitFor(() => t.events.some((e) => e.reason === 'DrainFailed'), { timeoutMs: 2000 });
    expect(t.controller.state).toBe('draining');
    expect(t.gate.held).toBe(true);
    await t.controller.drain();
    expect(t.stop.runs).toHaveLength(2);
  });
});

describe('Undrain', () => {
  it('ends a drained state: the file goes before the gate is released', async () => {
    const t = setup();
    await t.controller.drain();
    t.stop.runs[0]!.finish();
    await waitFor(() => t.controller.state === 'drained', { timeoutMs: 2000 });
    t.log.length = 0;
    await t.controller.undrain({ uid: 0, call: 'Undrain' });
    expect(t.log).toEqual(['remove drain.json', 'gate released', 'state none', 'event Undrained']);
    expect(await exists()).toBe(false);
    expect(t.events.at(-1)).toMatchObject({ reason: 'Undrained', uid: 0 });
  });

  it('cancels a drain under way: the run is aborted and its record is cancelled', async () => {
    const t = setup();
    await t.controller.drain();
    const signal = t.stop.runs[0]!.options.signal!;
    await t.controller.undrain();
    expect(signal.aborted).toBe(true);
    expect(t.events.map((e) => e.reason)).toEqual(['DrainStarted', 'DrainCancelled', 'Undrained']);
    expect(t.events[1]!.message).toContain('record 20261205T080000Z-1');
    expect(t.controller.state).toBe('none');
    expect(t.gate.held).toBe(false);
    expect(await exists()).toBe(false);
    // The aborted run's end must not mark the host drained afterwards.
    await new Promise((r) => setImmediate(r));
    expect(t.controller.state).toBe('none');
    expect(await exists()).toBe(false);
  });

  it('when not drained changes nothing', async () => {
    const t = setup();
    await t.controller.undrain();
    expect(t.log).toEqual([]);
  });

  it('a drain after an undrain runs again', async () => {
    const t = setup();
    await t.controller.drain();
    await t.controller.undrain();
    await t.controller.drain();
    expect(t.stop.runs).toHaveLength(2);
    expect(t.controller.state).toBe('draining');
  });
});

describe('a host shutdown or a stop of the agent during a drain', () => {
  it('a host shutdown leaves the run going (the host shutdown joins it); Undrain is ShuttingDown meanwhile', async () => {
    const t = setup();
    await t.controller.drain();
    t.agent.set('host-shutdown');
    expect(t.stop.runs[0]!.options.signal!.aborted).toBe(false);
    const err = await t.controller.undrain().catch((e: unknown) => e);
    expect(isAgentError(err, 'ShuttingDown')).toBe(true);
    expect(t.gate.held).toBe(true);
    t.stop.runs[0]!.finish([machineResult('a', 'clean')]);
    await waitFor(() => t.controller.state === 'drained', { timeoutMs: 2000 });
    expect((await persisted()).state).toBe('drained');
  });

  it('stop() cancels the run and leaves the drain persisted as draining, for the next start', async () => {
    const t = setup();
    await t.controller.drain();
    await t.controller.stop();
    expect(t.stop.runs[0]!.options.signal!.aborted).toBe(true);
    await new Promise((r) => setImmediate(r));
    expect(t.controller.state).toBe('draining');
    expect((await persisted()).state).toBe('draining');
    expect(t.events.map((e) => e.reason)).toEqual(['DrainStarted']);
  });

  it('a run that cannot start while the agent is not ready starts once it is running again', async () => {
    const t = setup({ agentState: 'starting' });
    await t.controller.drain();
    t.agent.set('host-shutdown');
    expect(t.stop.runs).toHaveLength(0);
    t.agent.set('running');
    await waitFor(() => t.stop.runs.length === 1, { timeoutMs: 2000 });
  });
});

describe('restore at start-up', () => {
  it('a drained host stays drained: gate held, no run', async () => {
    const first = setup();
    await first.controller.drain();
    first.stop.runs[0]!.finish();
    await waitFor(() => first.controller.state === 'drained', { timeoutMs: 2000 });

    const t = setup({ agentState: 'starting' });
    await t.controller.restore();
    expect(t.controller.state).toBe('drained');
    expect(t.gate.reason).toBe(DRAIN_REASON);
    t.agent.set('running');
    await new Promise((r) => setImmediate(r));
    expect(t.stop.runs).toHaveLength(0);
  });

  it('an interrupted drain is finished once the agent is running', async () => {
    await writeFile(drainStateFile(dir), JSON.stringify({ state: 'draining', since: 1 }));
    const t = setup({ agentState: 'starting' });
    await t.controller.restore();
    expect(t.controller.state).toBe('draining');
    expect(t.gate.held).toBe(true);
    expect(t.stop.runs).toHaveLength(0);
    t.agent.set('running');
    await waitFor(() => t.stop.runs.length === 1, { timeoutMs: 2000 });
    t.stop.runs[0]!.finish([machineResult('a', 'clean')]);
    await waitFor(() => t.controller.state === 'drained', { timeoutMs: 2000 });
    expect((await persisted()).state).toBe('drained');
  });

  it('a damaged drain file counts as drained', async () => {
    await writeFile(drainStateFile(dir), 'not json');
    const t = setup();
    await t.controller.restore();
    expect(t.controller.state).toBe('drained');
    expect(t.gate.held).toBe(true);
  });

  it('no file: nothing held', async () => {
    const t = setup();
    await t.controller.restore();
    expect(t.controller.state).toBe('none');
    expect(t.log).toEqual([]);
  });
});
