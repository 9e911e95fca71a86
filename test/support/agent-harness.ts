import { Agent } from '../../src/agent.js';
import { defaultConfig, type Config } from '../../src/config/config.js';
import { FakeClock, flushMicrotasks } from './fakes/fake-clock.js';
import { silentLogger, type Logger } from '../../src/logging/logger.js';
import { FakeHypervisor, type GuestBehaviour } from './fakes/fake-hypervisor.js';
import { FakeDiskProvisioner } from './fakes/fake-disks.js';
import { domainNameFor } from '../../src/machine/names.js';
import { MemoryStore } from './memory-store.js';

// Builds the real Agent on a fake hypervisor, fake disks, an in-memory store and a fake clock, so
// unit tests step time through every deadline in milliseconds.

export interface HarnessOptions {
  behaviour?: GuestBehaviour;
  shutdownDelayMs?: number;
  /** The fake hypervisor delivers domain events (default: it has none, and the agent polls). */
  events?: boolean;
  config?: (c: Config) => void;
  /** Where the fake clock starts, in milliseconds since the epoch. */
  clockStartMs?: number;
  /** The agent's logger (default: silent). */
  logger?: Logger;
}

export const SPEC = JSON.stringify({ cpus: 1, memoryMiB: 128, disks: [{ name: 'root', sizeGiB: 1 }] });

export class Harness {
  readonly clock: FakeClock;
  readonly hv: FakeHypervisor;
  readonly disks = new FakeDiskProvisioner();
  readonly store = new MemoryStore();
  readonly config: Config;
  private readonly logger: Logger;
  agent: Agent;

  constructor(opts: HarnessOptions = {}) {
    this.clock = new FakeClock(opts.clockStartMs);
    this.hv = new FakeHypervisor({ clock: this.clock, defaultBehaviour: opts.behaviour ?? 'obey', shutdownDelayMs: opts.shutdownDelayMs ?? 2000, events: opts.events });
    this.config = defaultConfig();
    this.config.stateDir = '/state';
    this.config.imageDirectories = ['/images'];
    opts.config?.(this.config);
    this.logger = opts.logger ?? silentLogger;
    this.agent = this.build();
  }

  get service() {
    return this.agent.service;
  }

  private build(): Agent {
    return new Agent({ config: this.config, clock: this.clock, logger: this.logger, store: this.store, hypervisor: this.hv, disks: this.disks });
  }

  async start(): Promise<this> {
    await this.agent.start();
    await this.settle();
    return this;
  }

  /** Simulates kill -9 and a new process: the old agent's timers die, state on "disk" stays. */
  async restart(): Promise<void> {
    await this.stopAgent();
    this.agent = this.build();
    await this.start();
  }

  /**
   * The agent's stop, with the fake clock moving while it waits: a call held under way ends the
   * wait at its bound instead of hanging the test.
   */
  async stopAgent(): Promise<void> {
    let stopped = false;
    const stopping = this.agent.stop().finally(() => void (stopped = true));
    await this.settle();
    while (!stopped) await this.advance(1000);
    await stopping;
  }

  async settle(): Promise<void> {
    await flushMicrotasks(40);
  }

  async advance(ms: number, stepMs = 100): Promise<void> {
    for (let done = 0; done < ms; done += stepMs) await this.clock.advance(Math.min(stepMs, ms - done));
    await this.settle();
  }

  /** Advances time in small steps until predicate holds; fails after limitMs of fake time. */
  async advanceUntil(predicate: () => boolean, limitMs = 600_000, stepMs = 100): Promise<number> {
    const start = this.clock.now();
    while (!predicate()) {
      if (this.clock.now() - start > limitMs) throw new Error(`condition not reached within ${limitMs} ms of fake time`);
      await this.clock.advance(stepMs);
      await this.settle();
    }
    return this.clock.now() - start;
  }

  async createRunning(name: string, spec = SPEC): Promise<void> {
    await this.service.create(name, spec);
    await this.advanceUntil(() => this.hv.stateOf(domainNameFor(name)) === 'running' && this.service.get(name).status.state === 'running');
  }

  reasons(machine?: string): string[] {
    return this.service.events().filter((e) => !machine || e.machine === machine).map((e) => e.reason);
  }

  event(machine: string, reason: string) {
    return this.service.events().find((e) => e.machine === machine && e.reason === reason);
  }

  exists(name: string): boolean {
    return this.service.list().some((r) => r.name === name);
  }
}
