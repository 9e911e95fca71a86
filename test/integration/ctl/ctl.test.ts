import { spawn } from 'node:child_process';
import { chmod, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startAgent, type AgentProcess } from '../../support/agent-process.js';
import { NOBODY, run, type ExecResult, type RunAs } from '../../support/busctl.js';
import { PROJECT_ROOT, startSystemBus, type PrivateBus } from '../../support/dbus-daemon.js';
import { waitFor } from '../../support/wait.js';

// The real vmkeeperctl (from source, through tsx) as a child process against the real agent on a
// system-like private bus carrying the project's policy, with libvirt's test driver.

const CTL_MAIN = path.join(PROJECT_ROOT, 'src/ctl/main.ts');
const SPEC = { cpus: 1, memoryMiB: 128, disks: [{ name: 'root', sizeGiB: 1 }], annotations: { owner: 'team-a' } };
const YAML_SPEC = 'cpus: 1\nmemoryMiB: 128\ndisks:\n  - name: root\n    sizeGiB: 1\n';

let bus: PrivateBus;
let dir: string;
let agent: AgentProcess;

const ctlArgs = (args: string[]) => ['--import', 'tsx', CTL_MAIN, '--bus', bus.address, ...args];
const ENV = { NO_COLOR: '1' };

/** vmkeeperctl ARGS, optionally as another user (setpriv). */
function ctl(args: string[], as?: RunAs): Promise<ExecResult> {
  return run(process.execPath, ctlArgs(args), { as, timeoutMs: 60_000 });
}

/** vmkeeperctl with text on stdin. */
function ctlWithStdin(args: string[], stdin: string): Promise<ExecResult> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ctlArgs(args), { cwd: PROJECT_ROOT, env: { ...process.env, ...ENV } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    child.on('exit', (code) => resolve({ code: code ?? 1, stdout, stderr }));
    child.stdin.end(stdin);
  });
}

interface ListedMachine {
  name: string;
  state: string;
  power: string;
  createdAt: string | null;
  forceStopAt: string | null;
  annotations: Record<string, string>;
  path: string;
}

async function listJson(): Promise<ListedMachine[]> {
  const r = await ctl(['--json', 'list']);
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout) as ListedMachine[];
}

const stateOf = async (name: string) => (await listJson()).find((m) => m.name === name)?.state;

async function waitForState(name: string, state: string): Promise<void> {
  await waitFor(async () => (await stateOf(name)) === state, { timeoutMs: 20_000, intervalMs: 200, what: `${name} ${state}` });
}

beforeAll(async () => {
  bus = await startSystemBus();
  dir = await mkdtemp(path.join(os.tmpdir(), 'vmkeeper-ctl-'));
  await chmod(dir, 0o755); // nobody reads spec files from here
  await mkdir(path.join(dir, 'images'));
  await writeFile(path.join(dir, 'node.xml'), '<node/>');
  await writeFile(path.join(dir, 'web.json'), JSON.stringify(SPEC));
  agent = await startAgent({
    busAddress: bus.address,
    stateDir: path.join(dir, 'state'),
    imageDir: path.join(dir, 'images'),
    libvirtUri: `test://${dir}/node.xml`,
  });
}, 90_000);

afterAll(async () => {
  await agent?.stop();
  await bus?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe('vmkeeperctl against the real agent', () => {
  it('prints help for the program and every command', async () => {
    const top = await ctl(['help']);
    expect(top.code).toBe(0);
    for (const command of ['list', 'status', 'create', 'delete', 'poweroff', 'poweron', 'events', 'annotate', 'drain', 'undrain', 'shutdowns', 'version']) {
      expect(top.stdout).toContain(`  ${command} `);
      const r = await ctl([command, '--help']);
      expect(r.code, command).toBe(0);
      expect(r.stdout).toContain(`Usage: vmkeeperctl [--bus ADDRESS] [--json] ${command}`);
    }
  });

  it('shows client and agent versions', async () => {
    const text = await ctl(['version']);
    expect(text.code, text.stderr).toBe(0);
    expect(text.stdout).toMatch(/^vmkeeperctl \d+\.\d+\.\d+\nvmkeeperd \d+\.\d+\.\d+ \(running, libvirt test:\/\/.* connected\)\n$/);
    const json = JSON.parse((await ctl(['version', '--json'])).stdout);
    expect(json).toMatchObject({ client: '0.1.0', agent: { version: expect.stringMatching(/^\d+\.\d+\.\d+/), state: 'running', libvirtConnected: true } });
  });

  it('creates machines from a JSON file and from YAML on stdin', async () => {
    const fromFile = await ctl(['create', 'web-1', '-f', path.join(dir, 'web.json')]);
    expect(fromFile, fromFile.stderr).toMatchObject({ code: 0, stdout: 'web-1: created\n' });
    const fromStdin = await ctlWithStdin(['create', 'db-1', '-f', '-', '--json'], YAML_SPEC);
    expect(fromStdin.code, fromStdin.stderr).toBe(0);
    expect(JSON.parse(fromStdin.stdout)).toEqual({ name: 'db-1', path: '/org/vmkeeper1/machine/db_2d1' });
    await waitForState('web-1', 'running');
    await waitForState('db-1', 'running');
  });

  it('refuses bad input with the field, the line and exit codes 4 and 7', async () => {
    // The same spec again is idempotent; another one under a taken name is a conflict.
    expect((await ctl(['create', 'web-1', '-f', path.join(dir, 'web.json')])).code).toBe(0);
    await writeFile(path.join(dir, 'web-other.json'), JSON.stringify({ ...SPEC, cpus: SPEC.cpus + 1 }));
    const exists = await ctl(['create', 'web-1', '-f', path.join(dir, 'web-other.json')]);
    expect(exists.code).toBe(7);
    expect(exists.stderr).toBe('vmkeeperctl: a machine named "web-1" already exists\n');

    const badName = await ctl(['create', 'Web_1', '-f', path.join(dir, 'web.json')]);
    expect(badName.code).toBe(4);
    expect(badName.stderr).toMatch(/^vmkeeperctl: invalid name: .+\n$/);

    const yaml = path.join(dir, 'bad.yaml');
    await writeFile(yaml, 'cpus: 1\nmemoryMiB: 128\ndisks:\n  - name: root\n    sizeGiB: lots\n');
    const badSpec = await ctl(['create', 'bad-1', '-f', yaml]);
    expect(badSpec.code).toBe(4);
    expect(badSpec.stderr).toBe(`vmkeeperctl: invalid spec: spec field "disks[0].sizeGiB": must be an integer (${yaml}:5)\n`);

    const broken = path.join(dir, 'broken.json');
    await writeFile(broken, '{"cpus": 1,\n  "disks": [\n');
    const unparsable = await ctl(['create', 'bad-2', '-f', broken]);
    expect(unparsable.code).toBe(4);
    expect(unparsable.stderr).toMatch(new RegExp(`^vmkeeperctl: ${broken}:\\d+:\\d+: not valid JSON or YAML: .+\\n$`));

    const missing = await ctl(['create', 'bad-3', '-f', path.join(dir, 'nope.yaml')]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/cannot read .*nope\.yaml: ENOENT/);

    const badGrace = await ctl(['delete', 'web-1', '--grace', '999999999']);
    expect(badGrace.code).toBe(4);
    expect(badGrace.stderr).toMatch(/^vmkeeperctl: invalid argument: grace period must be/);
    expect(await stateOf('web-1')).toBe('running');
    expect((await listJson()).map((m) => m.name)).toEqual(['db-1', 'web-1']);
  });

  it('lists machines as a table and as JSON', async () => {
    const table = await ctl(['list']);
    expect(table.code).toBe(0);
    const lines = table.stdout.trimEnd().split('\n');
    expect(lines[0]).toMatch(/^NAME\s+STATE\s+POWER\s+AGE\s+DEADLINE$/);
    expect(lines[1]).toMatch(/^db-1\s+running\s+on\s+\d+s\s+-$/);
    expect(lines[2]).toMatch(/^web-1\s+running\s+on\s+\d+s\s+-$/);
    expect(table.stdout).not.toContain('\x1b['); // not a terminal: no colour

    const machines = await listJson();
    expect(machines).toEqual([
      expect.objectContaining({ name: 'db-1', state: 'running', power: 'on', path: '/org/vmkeeper1/machine/db_2d1', forceStopAt: null }),
      expect.objectContaining({ name: 'web-1', state: 'running', power: 'on', annotations: { owner: 'team-a' } }),
    ]);
    expect(Date.parse(machines[0]!.createdAt!)).toBeGreaterThan(Date.now() - 120_000);

    // COLUMNS narrows the table: the widest column gives way with an ellipsis.
    const narrow = await run('env', ['COLUMNS=34', process.execPath, ...ctlArgs(['list'])]);
    expect(narrow.stdout).toContain('…');
    for (const line of narrow.stdout.trimEnd().split('\n')) expect(line.length).toBeLessThanOrEqual(34);
  });

  it('shows the status of a machine for a person and as the Describe record', async () => {
    const text = await ctl(['status', 'web-1']);
    expect(text.code, text.stderr).toBe(0);
    expect(text.stdout).toMatch(/^\s*Name: web-1$/m);
    expect(text.stdout).toMatch(/^\s*State: running$/m);
    expect(text.stdout).toMatch(/^\s*Domain: vmkeeper-web-1$/m);
    expect(text.stdout).toMatch(/^\s*Disks: root: empty, 1 GiB$/m);
    expect(text.stdout).toMatch(/^\s*Annotations: owner=team-a$/m);
    expect(text.stdout).toContain('Recent events:');

    const json = await ctl(['status', 'web-1', '--json']);
    const record = JSON.parse(json.stdout);
    expect(record).toMatchObject({ metadata: { name: 'web-1', domainName: 'vmkeeper-web-1' }, spec: { cpus: 1, memoryMiB: 128 }, status: { state: 'running', power: 'on' } });

    const ghost = await ctl(['status', 'ghost']);
    expect(ghost).toMatchObject({ code: 3, stdout: '', stderr: 'vmkeeperctl: no machine named "ghost"\n' });
  });

  it('merges annotations: key=value sets, key- removes', async () => {
    const r = await ctl(['annotate', 'web-1', 'tier=web', 'env=prod']);
    expect(r, r.stderr).toMatchObject({ code: 0, stdout: 'web-1: annotated\n' });
    const r2 = await ctl(['annotate', 'web-1', 'owner-', 'env=staging', '--json']);
    expect(JSON.parse(r2.stdout)).toEqual({ name: 'web-1', annotations: { tier: 'web', env: 'staging' } });
    const record = JSON.parse((await ctl(['status', 'web-1', '--json'])).stdout);
    expect(record.metadata.annotations).toEqual({ tier: 'web', env: 'staging' });
    expect((await ctl(['annotate', 'web-1', 'novalue'])).code).toBe(2);
    expect((await ctl(['annotate', 'ghost', 'a=b'])).code).toBe(3);
  });

  it('powers a machine off and on, waiting for each', async () => {
    const off = await ctl(['poweroff', 'web-1', '--wait', '--timeout', '30']);
    expect(off.code, off.stderr).toBe(0);
    expect(off.stdout).toMatch(/^web-1: power-off requested, waiting for state stopped$/m);
    expect(off.stdout).toMatch(/^web-1: stopped \(after \d+s\)$/m);
    expect(await stateOf('web-1')).toBe('stopped');

    // Already off: the goal is reached at once.
    const again = await ctl(['poweroff', 'web-1', '--wait', '--json']);
    expect(again.code).toBe(0);
    expect(JSON.parse(again.stdout)).toMatchObject({ name: 'web-1', state: 'stopped' });

    const on = await ctl(['poweron', 'web-1', '--wait', '--timeout', '30']);
    expect(on.code, on.stderr).toBe(0);
    expect(on.stdout).toMatch(/^web-1: running \(after \d+s\)$/m);
    expect(await stateOf('web-1')).toBe('running');

    const plain = await ctl(['poweroff', 'db-1']);
    expect(plain).toMatchObject({ code: 0, stdout: 'db-1: power-off requested\n' });
    await waitForState('db-1', 'stopped');
    expect((await ctl(['poweron', 'db-1', '--json'])).code).toBe(0);
    await waitForState('db-1', 'running');
  });

  it('drains with --wait, shows the drain\'s record, and undrains', async () => {
    const drain = await ctl(['drain', '--wait']);
    expect(drain.code, drain.stderr).toBe(0);
    const lines = drain.stdout.trimEnd().split('\n');
    expect(lines[0]).toMatch(/^\d+\s+\S+Z\s+normal\s+\(host\)\s+DrainStarted\s+uid 0 Drain\s/);
    expect(lines.some((l) => /\s(db-1|web-1)\s+ShutdownCompleted\s/.test(l))).toBe(true);
    expect(lines.at(-1)).toBe('host drained');
    expect(JSON.parse((await ctl(['version', '--json'])).stdout).agent).toMatchObject({ drainState: 'drained' });
    await waitForState('web-1', 'stopped');
    await waitForState('db-1', 'stopped');

    const list = await ctl(['shutdowns']);
    expect(list.code, list.stderr).toBe(0);
    const row = list.stdout.trimEnd().split('\n').find((l) => /\sdrain\s+completed\s/.test(l))!;
    expect(row.split(/\s+/).slice(5)).toEqual(['2', '0', '0', '0', '0']); // both machines shut down cleanly
    const shown = await ctl(['shutdowns', row.split(/\s+/)[0]!]);
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stdout).toMatch(/^Kind: drain$/m);
    expect(shown.stdout).toMatch(/^db-1\s+shutdown\s+0\s+0\s+clean\s/m);
    expect((await ctl(['shutdowns', 'nope'])).code).toBe(3);

    const undrain = await ctl(['undrain']);
    expect(undrain).toMatchObject({ code: 0, stdout: 'undrained: machines start again\n' });
    await waitForState('web-1', 'running');
    await waitForState('db-1', 'running');
  });

  it('lists events, for one machine, as a table and as JSON', async () => {
    const all = JSON.parse((await ctl(['events', '--json'])).stdout) as Array<{ machine: string; reason: string; timestamp: string }>;
    expect(all.filter((e) => e.machine === 'web-1').map((e) => e.reason)).toEqual(expect.arrayContaining(['Stopped']));
    expect(Date.parse(all[0]!.timestamp)).toBeGreaterThan(0);
    const one = await ctl(['events', 'db-1']);
    expect(one.code).toBe(0);
    const lines = one.stdout.trimEnd().split('\n');
    expect(lines[0]).toMatch(/^SEQ\s+TIME\s+TYPE\s+MACHINE\s+REASON\s+BY\s+MESSAGE$/);
    expect(lines.slice(1).every((l) => /^\d+\s+\S+Z\s+(normal|warning)\s+db-1\s+\S+\s+(agent|uid \d+ \w+)\s+/.test(l))).toBe(true);
    expect(lines.some((l) => /\sCreated\s+uid 0 CreateMachine\s/.test(l))).toBe(true);
  });

  it('follows events as they happen and stops cleanly on SIGINT', async () => {
    expect((await ctl(['create', 'temp-1', '-f', path.join(dir, 'web.json')])).code).toBe(0);
    await waitForState('temp-1', 'running');
    const child = spawn(process.execPath, ctlArgs(['events', '--follow', '--json', 'temp-1']), { cwd: PROJECT_ROOT, env: { ...process.env, ...ENV } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    try {
      // The follower subscribes before it lists the backlog: once "Created" is printed, it is live.
      await waitFor(() => stdout.includes('"Created"'), { timeoutMs: 20_000, what: `the backlog in followed events (stderr: ${stderr})` });
      expect((await ctl(['delete', 'temp-1'])).code).toBe(0);
      await waitFor(() => stdout.includes('"Deleted"'), { timeoutMs: 20_000, what: `Deleted in followed events (stderr: ${stderr})` });
    } finally {
      child.kill('SIGINT');
    }
    expect(await exited).toBe(0);
    const lines = stdout.trimEnd().split('\n');
    const events = lines.map((l) => JSON.parse(l) as { machine: string; reason: string });
    expect(events.every((e) => e.machine === 'temp-1')).toBe(true);
    const reasons = events.map((e) => e.reason);
    expect(reasons).toEqual(expect.arrayContaining(['DeletionRequested', 'Deleted']));
    expect(new Set(lines).size).toBe(lines.length); // no event (same time, reason and message) printed twice
    expect(reasons.filter((r) => r === 'Deleted')).toHaveLength(1); // the ListEvents/signal overlap is printed once
  });

  it('deletes with --wait: the graceful path', async () => {
    const r = await ctl(['delete', 'db-1', '--grace', '30', '--wait', '--timeout', '60']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/^db-1: deletion requested \(grace 30s\), waiting for it to be gone$/m);
    expect(r.stdout).toMatch(/^db-1: shutdown requested: ACPI shutdown sent; force stop in 30s$/m);
    expect(r.stdout).toMatch(/^db-1: shutdown completed: guest shut down by itself$/m);
    expect(r.stdout).toMatch(/^db-1: gone \(after \d+s\)$/m);
    expect(r.stdout).not.toContain('force-stopped');
    expect((await listJson()).map((m) => m.name)).toEqual(['web-1']);
    expect((await ctl(['delete', 'db-1'])).code).toBe(3);
  });

  it('deletes with --grace 0 --wait: the forced path on the real agent', async () => {
    expect((await ctl(['create', 'force-1', '-f', path.join(dir, 'web.json')])).code).toBe(0);
    await waitForState('force-1', 'running');
    const r = await ctl(['delete', 'force-1', '--grace', '0', '--wait', '--json']);
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ name: 'force-1', state: 'removed' });
    const events = JSON.parse((await ctl(['events', 'force-1', '--json'])).stdout) as Array<{ reason: string }>;
    expect(events.map((e) => e.reason)).toContain('ForceStopped');
  });

  it('lets a user outside the vmkeeper group list but not change anything (exit 5)', async () => {
    const list = await ctl(['list', '--json'], NOBODY);
    expect(list.code, list.stderr).toBe(0);
    expect((JSON.parse(list.stdout) as ListedMachine[]).map((m) => m.name)).toEqual(['web-1']);
    expect((await ctl(['status', 'web-1'], NOBODY)).code).toBe(0);
    expect((await ctl(['events'], NOBODY)).code).toBe(0);
    for (const args of [
      ['create', 'evil-1', '-f', path.join(dir, 'web.json')],
      ['delete', 'web-1'],
      ['delete', 'web-1', '--wait'],
      ['poweroff', 'web-1'],
      ['poweron', 'web-1'],
      ['annotate', 'web-1', 'a=b'],
    ]) {
      const r = await ctl(args, NOBODY);
      expect(r.code, args.join(' ')).toBe(5);
      expect(r.stderr).toBe('vmkeeperctl: access denied: changing machines needs root or membership in the vmkeeper group\n');
    }
    expect(await stateOf('web-1')).toBe('running');
  });

  it('reports usage errors with exit 2', async () => {
    for (const args of [[], ['frobnicate'], ['status'], ['list', 'extra'], ['delete', 'web-1', '--grace', 'soon'], ['poweroff', 'web-1', '--timeout', '5'], ['list', '--bogus'], ['create', 'x']]) {
      const r = await ctl(args);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.stderr).toMatch(/^vmkeeperctl: .+\nTry 'vmkeeperctl .*'\.\n$/);
    }
  });

  it('says the agent is not running (exit 6) on a bus without it, and never prints a stack trace', async () => {
    const empty = await startSystemBus();
    try {
      const r = await run(process.execPath, ['--import', 'tsx', CTL_MAIN, '--bus', empty.address, 'list']);
      expect(r).toMatchObject({ code: 6, stdout: '', stderr: 'vmkeeperctl: vmkeeperd is not running (nobody owns org.vmkeeper1 on this bus)\n' });
      const version = await run(process.execPath, ['--import', 'tsx', CTL_MAIN, '--bus', empty.address, 'version']);
      expect(version.code).toBe(6);
      expect(version.stdout).toMatch(/^vmkeeperctl \d+\.\d+\.\d+\n$/);
    } finally {
      await empty.stop();
    }
    const noBus = await run(process.execPath, ['--import', 'tsx', CTL_MAIN, '--bus', `unix:path=${dir}/no-such-socket`, 'list']);
    expect(noBus.code).toBe(6);
    expect(noBus.stderr).toMatch(/^vmkeeperctl: cannot connect to D-Bus at unix:path=.*: no bus socket there/);
    expect(noBus.stderr).not.toMatch(/\n\s+at /);
  });

  it('deletes the last machine with --wait and leaves nothing behind', async () => {
    const r = await ctl(['delete', 'web-1', '--wait']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/^web-1: gone \(after \d+s\)$/m);
    const empty = await ctl(['list']);
    expect(empty).toMatchObject({ code: 0, stdout: '', stderr: 'No machines.\n' });
    expect(JSON.parse((await ctl(['list', '--json'])).stdout)).toEqual([]);
  });
});
