import { describe, expect, it } from 'vitest';
import { defaultConfig } from '../../../src/config/config.js';
import type { Logger } from '../../../src/logging/logger.js';
import { applyRuntimeKeys, diffConfig, levelGate, RUNTIME_KEYS } from '../../../src/systemd/reload.js';

describe('config reload', () => {
  it('splits changed keys into applied now and needing a restart', () => {
    const a = defaultConfig();
    const b = defaultConfig();
    b.log.level = 'debug';
    b.hostShutdown.timeoutSec = 300;
    b.machines.sweepIntervalSec = 5;
    b.imageDirectories = ['/srv/images'];
    expect(diffConfig(a, b)).toEqual({
      applied: ['hostShutdown.timeoutSec', 'log.level'],
      needRestart: ['imageDirectories', 'machines.sweepIntervalSec'],
    });
    expect(diffConfig(a, defaultConfig())).toEqual({ applied: [], needRestart: [] });
  });

  it('applies only the runtime keys, in place', () => {
    const live = defaultConfig();
    const held = live.hostShutdown;
    const next = defaultConfig();
    next.log.level = 'error';
    next.hostShutdown = { action: 'leave', timeoutSec: 9, parallelism: 2, onServiceStop: 'shutdown', groups: [{ minPriority: 0, budgetSec: 9 }] };
    next.machines.sweepIntervalSec = 99;
    applyRuntimeKeys(live, next);
    expect(live.log.level).toBe('error');
    expect(live.hostShutdown).toEqual(next.hostShutdown);
    expect(live.hostShutdown).not.toBe(held);
    expect(live.machines.sweepIntervalSec).toBe(10);
    for (const k of RUNTIME_KEYS) expect(k).toMatch(/^(log\.level|hostShutdown\.)/);
  });

  it('the level gate follows the live level', () => {
    const lines: string[] = [];
    const sink: Logger = { error: (m) => lines.push(`E ${m}`), warn: (m) => lines.push(`W ${m}`), info: (m) => lines.push(`I ${m}`), debug: (m) => lines.push(`D ${m}`) };
    let level: 'info' | 'debug' | 'error' = 'info';
    const log = levelGate(sink, () => level);
    log.debug('a');
    log.info('b');
    level = 'debug';
    log.debug('c');
    level = 'error';
    log.warn('d');
    log.error('e');
    expect(lines).toEqual(['I b', 'D c', 'E e']);
  });
});
