import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawnAgent, type AgentProcessOptions } from '../../support/agent-process.js';

// Issue 15, item 5, on the real binary: a config that would make host files (or the host's own
// trees) image sources or the state dir stops start-up with exit 78 (EX_CONFIG) and a one-line
// message naming where the bad value came from, before the agent touches the bus or libvirt.

const EX_CONFIG = 78;

describe('security: config refusals of vmkeeperd', () => {
  let dir: string;
  let base: AgentProcessOptions;

  beforeAll(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'vmk-sec-config-'));
    base = {
      busAddress: `unix:path=${path.join(dir, 'no-bus')}`,
      libvirtUri: 'test:///default',
      stateDir: path.join(dir, 'state'),
      imageDir: path.join(dir, 'images'),
    };
  });
  afterAll(() => rm(dir, { recursive: true, force: true }));

  /** Runs the agent to its exit; the exit must come within the deadline. */
  async function exitOf(o: Partial<AgentProcessOptions>): Promise<{ code: number | null; output: string }> {
    const agent = spawnAgent({ ...base, ...o });
    const deadline = setTimeout(() => agent.child.kill('SIGKILL'), 30_000);
    const { code } = await agent.exited;
    clearTimeout(deadline);
    return { code, output: agent.output() };
  }

  it.each<[string, Partial<AgentProcessOptions>, string]>([
    ['an image dir of /', { extraArgs: ['--image-dir', '/'] }, 'command line: --image-dir: /: must not be a system directory or contain one (/)'],
    ['a state dir of /', { stateDir: '/' }, 'command line: --state-dir: must not be a system directory or contain one (/)'],
    ['a state dir of /etc', { stateDir: '/etc' }, 'command line: --state-dir: must not be a system directory or contain one (/etc)'],
    ['an image dir that is the state dir', { imageDir: '/srv/vmk', stateDir: '/srv/vmk' }, 'command line: --image-dir: /srv/vmk: must not be or contain the state directory (/srv/vmk)'],
  ])('refuses %s with exit 78', async (_what, o, message) => {
    const { code, output } = await exitOf(o);
    expect(code, output).toBe(EX_CONFIG);
    expect(output).toContain(`vmkeeperd: ${message}`);
  });

  it('refuses a YAML alias bomb with exit 78, naming the file', async () => {
    const file = path.join(dir, 'bomb.yaml');
    const levels = ['l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]'];
    for (let i = 1; i <= 9; i++) levels.push(`l${i}: &l${i} [${Array(9).fill(`*l${i - 1}`).join(', ')}]`);
    await writeFile(file, `${levels.join('\n')}\n`);
    const started = performance.now();
    const { code, output } = await exitOf({ configFile: file });
    expect(code, output).toBe(EX_CONFIG);
    expect(output).toContain(`vmkeeperd: ${file}: YAML aliases expand too far (more than 100): refusing a possible alias bomb`);
    // Refused before expanding: no 9^10 list built (that would take minutes and gigabytes).
    expect(performance.now() - started).toBeLessThan(20_000);
  });
});
