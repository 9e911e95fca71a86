import { describe, expect, it } from 'vitest';
import { runCli } from '../../../../src/ctl/cli.js';
import { applyAnnotationChanges, parseAnnotationArgs } from '../../../../src/ctl/commands/annotate.js';
import { COMMANDS } from '../../../../src/ctl/commands/index.js';
import { CtlError } from '../../../../src/ctl/errors.js';
import { captureIo } from '../../../../src/ctl/io.js';
import { FakeClock, flushMicrotasks } from '../../../support/fakes/fake-clock.js';
import { DBusError } from 'dbus-next';
import { FakeClient, machine } from '../fake-client.js';

// Each command on a fake client: output, --json, exit codes. The real agent is in test/integration/ctl.

function setup(o: Parameters<typeof captureIo>[0] = {}) {
  const clock = new FakeClock(Date.UTC(2026, 0, 1, 12, 0, 0));
  const client = new FakeClient();
  const io = captureIo(o);
  const abort = new AbortController();
  let connectedTo: string | undefined;
  const run = (...argv: string[]) =>
    runCli(argv, { io, clock, env: {}, connect: async (address) => ((connectedTo = address), client), signal: abort.signal });
  return { clock, client, io, abort, run, connectedTo: () => connectedTo };
}

describe('vmkeeperctl', () => {
  it('prints help without connecting, for the program and for each command', async () => {
    for (const argv of [['help'], ['--help'], ['-h'], ...COMMANDS.map((c) => [c.name, '--help']), ['help', 'delete']]) {
      const s = setup();
      expect(await s.run(...argv), argv.join(' ')).toBe(0);
      expect(s.io.stdout).toMatch(/^Usage: vmkeeperctl /);
      expect(s.connectedTo()).toBeUndefined();
    }
  });

  it.each<[string[], RegExp]>([
    [[], /no command given/],
    [['nope'], /unknown command "nope"/],
    [['status'], /missing argument: status NAME/],
    [['list', 'x'], /unexpected argument "x"/],
    [['delete', 'a', '--grace', '-1'], /unknown option -1|--grace wants whole seconds/],
    [['--bus', 'nonsense', 'list'], /--bus wants system, session or a D-Bus address/],
    [['annotate', 'a', '=x'], /expected key=value or key-/],
    [['create', 'a'], /create needs a spec/],
    [['help', 'nope'], /no help for unknown command/],
  ])('%j is a usage error (exit 2)', async (argv, message) => {
    const s = setup();
    expect(await s.run(...argv)).toBe(2);
    expect(s.io.stderr).toMatch(message);
    expect(s.io.stderr).toMatch(/\nTry 'vmkeeperctl( \w+ --help| help)'\.\n$/);
    expect(s.io.stdout).toBe('');
  });

  it.each<[string[], string]>([
    [['list'], 'system'],
    [['--bus', 'unix:path=/run/x', 'list'], 'unix:path=/run/x'],
    [['list', '--bus=session'], 'session'],
  ])('%j connects to %s (the system bus by default, --bus otherwise)', async (argv, address) => {
    const s = setup();
    await s.run(...argv);
    expect(s.connectedTo()).toBe(address);
  });

  it('maps failures to one line and the exit code, never a stack trace', async () => {
    const s = setup();
    s.client.failWith = new CtlError('cannot connect to D-Bus at system: no bus socket there', 6);
    expect(await s.run('list')).toBe(6);
    expect(s.io.stderr).toBe('vmkeeperctl: cannot connect to D-Bus at system: no bus socket there\n');
    const t = setup();
    t.client.failWith = new DBusError('org.freedesktop.DBus.Error.Failed', 'oops\n    at foo (bar.js:1:1)');
    expect(await t.run('list')).toBe(1);
    expect(t.io.stderr).toBe('vmkeeperctl: oops\n');
  });
});

describe('list', () => {
  function withMachines() {
    const s = setup({ columns: 200 });
    const now = s.clock.now();
    s.client.add(machine('web-1', { createdAt: now - 3 * 3600_000 }));
    s.client.add(machine('db-1', { state: 'terminating', createdAt: now - 90_000, forceStopAt: now + 23_400, deletionTimestamp: now - 5000 }));
    s.client.add(machine('old-1', { state: 'stopping', power: 'off', createdAt: now - 86_400_000 * 2, forceStopAt: now - 2000 }));
    return s;
  }

  it('prints a table with age and a deadline countdown for machines being stopped or deleted', async () => {
    const s = withMachines();
    expect(await s.run('list')).toBe(0);
    expect(s.io.stdout).toBe(
      'NAME    STATE         POWER   AGE     DEADLINE\n' +
        'db-1    terminating   on      1m30s   in 24s\n' +
        'old-1   stopping      off     2d      overdue 2s\n' +
        'web-1   running       on      3h      -\n',
    );
  });

  it('fits the terminal and colours states only when asked to', async () => {
    const s = withMachines();
    s.io.columns = 30;
    await s.run('list');
    expect(s.io.stdout.split('\n').every((l) => Array.from(l).length <= 30)).toBe(true);
    const c = setup({ color: true });
    c.client.add(machine('web-1'));
    await c.run('list');
    expect(c.io.stdout).toContain('\x1b[32mrunning');
  });

  it('--json prints an array of objects', async () => {
    const s = withMachines();
    expect(await s.run('--json', 'list')).toBe(0);
    const list = JSON.parse(s.io.stdout);
    expect(list.map((m: { name: string }) => m.name)).toEqual(['db-1', 'old-1', 'web-1']);
    expect(list[0]).toEqual({
      name: 'db-1',
      state: 'terminating',
      power: 'on',
      createdAt: '2026-01-01T11:58:30.000Z',
      deletionTimestamp: '2026-01-01T11:59:55.000Z',
      forceStopAt: '2026-01-01T12:00:23.400Z',
      gracePeriodSec: 0,
      annotations: {},
      path: '/org/vmkeeper1/machine/db_2d1',
    });
    const empty = setup();
    await empty.run('list', '--json');
    expect(empty.io.stdout).toBe('[]\n');
  });

  it('says so on stderr when there are no machines', async () => {
    const s = setup();
    expect(await s.run('list')).toBe(0);
    expect(s.io).toMatchObject({ stdout: '', stderr: 'No machines.\n' });
  });
});

describe('status', () => {
  it('lays the Describe record out for a person, with recent events', async () => {
    const s = setup();
    s.client.add(machine('web-1', { annotations: { owner: 'a' }, spec: JSON.stringify({ cpus: 2, memoryMiB: 512, disks: [{ name: 'root', sizeGiB: 1 }], nics: [{ name: 'eth0', network: 'default' }] }) }));
    s.client.events.push({ timestamp: s.clock.now() - 1000, machine: 'web-1', type: 'normal', reason: 'Started', message: 'domain started' });
    s.client.events.push({ timestamp: s.clock.now(), machine: 'other', type: 'normal', reason: 'Started', message: 'x' });
    expect(await s.run('status', 'web-1')).toBe(0);
    expect(s.io.stdout).toContain('       Name: web-1\n');
    expect(s.io.stdout).toContain('      State: running\n');
    expect(s.io.stdout).toContain('       CPUs: 2\n');
    expect(s.io.stdout).toContain('     Memory: 512 MiB\n');
    expect(s.io.stdout).toContain('      Disks: root: empty, 1 GiB\n');
    expect(s.io.stdout).toContain('       NICs: eth0: network default\n');
    expect(s.io.stdout).toContain('Annotations: owner=a\n');
    expect(s.io.stdout).toMatch(/Recent events:\nTIME\s+TYPE\s+REASON\s+MESSAGE\n2026-01-01T11:59:59Z\s+normal\s+Started\s+domain started\n$/);
  });

  it('shows the deadline of a deletion in progress', async () => {
    const s = setup();
    s.client.describeMachine = async () =>
      JSON.stringify({
        metadata: { name: 'web-1', deletionTimestamp: '2026-01-01T11:59:50.000Z', deletionGracePeriodSec: 30 },
        spec: {},
        status: { state: 'terminating', shutdownRequestedAt: '2026-01-01T11:59:51.000Z', forceStopAt: '2026-01-01T12:00:20.000Z', gracePeriodSec: 30 },
      });
    await s.run('status', 'web-1');
    expect(s.io.stdout).toContain('Deleting: since 2026-01-01T11:59:50Z, grace 30s\n');
    expect(s.io.stdout).toContain('Shutdown: requested 2026-01-01T11:59:51Z (9s ago)\n');
    expect(s.io.stdout).toContain('Force stop: 2026-01-01T12:00:20Z (in 20s)\n');
  });

  it('--json prints the record; an unknown machine is exit 3', async () => {
    const s = setup();
    s.client.add(machine('web-1'));
    await s.run('status', '--json', 'web-1');
    expect(JSON.parse(s.io.stdout)).toMatchObject({ metadata: { name: 'web-1' }, status: { state: 'running' } });
    const t = setup();
    expect(await t.run('status', 'ghost')).toBe(3);
    expect(t.io.stderr).toBe('vmkeeperctl: no machine named "ghost"\n');
  });
});

describe('create', () => {
  it('converts YAML to JSON and sends it', async () => {
    const s = setup({ files: { 'spec.yaml': 'cpus: 1\nmemoryMiB: 256\ndisks:\n  - {name: root, sizeGiB: 1}\nannotations:\n  owner: team-a\n' } });
    expect(await s.run('create', 'web-1', '-f', 'spec.yaml')).toBe(0);
    expect(s.client.calls).toEqual(['create web-1 {"cpus":1,"memoryMiB":256,"disks":[{"name":"root","sizeGiB":1}],"annotations":{"owner":"team-a"}}']);
    expect(s.io.stdout).toBe('web-1: created\n');
  });

  it('reads stdin with -f - and prints the path with --json', async () => {
    const s = setup({ stdin: '{"cpus": 1, "disks": []}' });
    expect(await s.run('--json', 'create', 'web-1', '-f', '-')).toBe(0);
    expect(JSON.parse(s.io.stdout)).toEqual({ name: 'web-1', path: '/org/vmkeeper1/machine/web_2d1' });
    expect(s.client.calls[0]).toBe('create web-1 {"cpus":1,"disks":[]}');
  });

  it('names the field and its line when the agent rejects the spec', async () => {
    const s = setup({ files: { 's.yaml': 'cpus: 1\ndisks:\n  - name: root\n    sizeGiB: -3\n' } });
    s.client.onCreate = () => {
      throw new DBusError('org.vmkeeper1.Error.InvalidSpec', 'spec field "disks[0].sizeGiB": must be between 1 and 65536');
    };
    expect(await s.run('create', 'web-1', '-f', 's.yaml')).toBe(4);
    expect(s.io.stderr).toBe('vmkeeperctl: invalid spec: spec field "disks[0].sizeGiB": must be between 1 and 65536 (s.yaml:4)\n');
  });

  it.each<[string, RegExp, number]>([
    ['cpus: [1\n', /^vmkeeperctl: s\.yaml:\d+:\d+: not valid JSON or YAML: /, 4],
    ['- 1\n- 2\n', /^vmkeeperctl: s\.yaml: the spec must be a JSON object \(YAML mapping\)\n$/, 4],
    ['cpus: 1\ncpus: 2\n', /not valid JSON or YAML: Map keys must be unique/, 4],
  ])('refuses %j before calling the agent', async (text, message, code) => {
    const s = setup({ files: { 's.yaml': text } });
    expect(await s.run('create', 'web-1', '-f', 's.yaml')).toBe(code);
    expect(s.io.stderr).toMatch(message);
    expect(s.client.calls).toEqual([]);
  });

  it('reports an unreadable file with exit 1', async () => {
    const s = setup();
    expect(await s.run('create', 'web-1', '-f', 'missing.json')).toBe(1);
    expect(s.io.stderr).toBe("vmkeeperctl: cannot read missing.json: ENOENT: no such file or directory, open 'missing.json'\n");
  });
});

describe('delete, poweroff, poweron without --wait', () => {
  it('makes the call and says what was requested', async () => {
    const s = setup();
    s.client.add(machine('web-1'));
    expect(await s.run('delete', 'web-1')).toBe(0);
    expect(await s.run('delete', 'web-1', '--grace', '0')).toBe(0);
    expect(await s.run('poweroff', 'web-1')).toBe(0);
    expect(await s.run('poweron', 'web-1', '--json')).toBe(0);
    expect(s.client.calls).toEqual(['delete web-1 -', 'delete web-1 0', 'power web-1 off', 'power web-1 on']);
    expect(s.io.stdout).toBe(
      'web-1: deletion requested\nweb-1: deletion requested (grace 0s)\nweb-1: power-off requested\n' +
        JSON.stringify({ name: 'web-1', requested: 'poweron' }, null, 2) + '\n',
    );
  });

  it.each<[string, number]>([
    ['org.vmkeeper1.Error.MachineTerminating', 7],
    ['org.freedesktop.DBus.Error.AccessDenied', 5],
    ['org.vmkeeper1.Error.ShuttingDown', 7],
  ])('%s -> exit %d', async (name, code) => {
    const s = setup();
    s.client.add(machine('web-1'));
    s.client.onPower = () => {
      throw new DBusError(name, 'refused');
    };
    expect(await s.run('poweroff', 'web-1', '--wait')).toBe(code);
    expect(s.io.stdout).toBe('');
  });
});

describe('annotate', () => {
  it('parses key=value and key-', () => {
    expect(parseAnnotationArgs(['a=1', 'b=', 'c-', 'url=http://x?y=z'])).toEqual({ set: { a: '1', b: '', url: 'http://x?y=z' }, remove: ['c'] });
    expect(() => parseAnnotationArgs(['-'])).toThrow(/expected key=value/);
    expect(() => parseAnnotationArgs(['plain'])).toThrow(/expected key=value/);
    for (const key of ['__proto__', 'constructor', 'a/b/c']) {
      expect(() => parseAnnotationArgs([`${key}=x`])).toThrow(expect.objectContaining({ exitCode: 4, message: expect.stringContaining(JSON.stringify(key)) }));
    }
    expect(applyAnnotationChanges({ a: '1', b: '2', c: '3' }, { set: { a: 'x', d: '4' }, remove: ['b', 'nope'] })).toEqual({ a: 'x', c: '3', d: '4' });
  });

  it('merges into the existing annotations', async () => {
    const s = setup();
    s.client.add(machine('web-1', { annotations: { owner: 'a', tier: 'web' } }));
    expect(await s.run('annotate', 'web-1', 'owner=b', 'tier-', 'env=prod')).toBe(0);
    expect(s.client.machines.get('web-1')!.annotations).toEqual({ owner: 'b', env: 'prod' });
    expect(s.io.stdout).toBe('web-1: annotated\n');
    expect(s.client.calls).toContain('annotate web-1 {"owner":"b","env":"prod"} @1');
  });

  it('on a Conflict reads again and merges into what the other writer left, never over it', async () => {
    const s = setup();
    s.client.add(machine('web-1', { annotations: { owner: 'a' } }));
    let raced = false;
    s.client.beforeAnnotate = (name) => {
      if (raced) return;
      raced = true;
      const m = s.client.machines.get(name)!;
      s.client.machines.set(name, { ...m, annotations: { owner: 'a', other: 'writer' }, resourceVersion: m.resourceVersion + 1 });
    };
    expect(await s.run('annotate', 'web-1', 'env=prod')).toBe(0);
    expect(s.client.machines.get('web-1')!.annotations).toEqual({ owner: 'a', other: 'writer', env: 'prod' });
    expect(s.client.calls.filter((c) => c.startsWith('annotate'))).toHaveLength(2);
  });

  it('gives up with a conflict exit code after a bounded number of attempts', async () => {
    const s = setup();
    s.client.add(machine('web-1'));
    s.client.beforeAnnotate = (name) => s.client.change(name, {});
    expect(await s.run('annotate', 'web-1', 'env=prod')).toBe(7);
    expect(s.client.calls.filter((c) => c.startsWith('annotate'))).toHaveLength(5);
    expect(s.io.stderr).toMatch(/kept changing/);
  });
});

describe('events', () => {
  const e = (t: number, machineName: string, reason: string, type = 'normal') => ({ timestamp: Date.UTC(2026, 0, 1, 11, 0, t), machine: machineName, type, reason, message: `${reason} happened` });

  it('lists journaled events with their sequence and who caused them, for one machine, and as JSON', async () => {
    const s = setup();
    s.client.events = [{ ...e(1, 'web-1', 'Created'), uid: '1000', call: 'CreateMachine' }, e(2, 'db-1', 'Created'), { ...e(3, 'web-1', 'ForceStopped', 'warning'), uid: '', call: '' }];
    await s.run('events', 'web-1');
    expect(s.io.stdout).toBe(
      'SEQ   TIME                   TYPE      MACHINE   REASON         BY                       MESSAGE\n' +
        '1     2026-01-01T11:00:01Z   normal    web-1     Created        uid 1000 CreateMachine   Created happened\n' +
        '3     2026-01-01T11:00:03Z   warning   web-1     ForceStopped   agent                    ForceStopped happened\n',
    );
    const j = setup();
    j.client.events = s.client.events;
    await j.run('events', '--json', '--after', '1');
    expect(JSON.parse(j.io.stdout)).toHaveLength(2);
    expect(JSON.parse(j.io.stdout)[1]).toEqual({ sequence: 3, timestamp: '2026-01-01T11:00:03.000Z', machine: 'web-1', type: 'warning', reason: 'ForceStopped', message: 'ForceStopped happened', uid: null, call: null });
  });

  it('--follow prints the backlog, then new events once each by sequence, until interrupted', async () => {
    const s = setup();
    s.client.events = [{ ...e(1, 'web-1', 'Created'), sequence: 1 }];
    const original = s.client.listEventsSince.bind(s.client);
    // An event that happens between the subscription and the listing is in both.
    s.client.listEventsSince = async (after, m) => {
      if (s.client.events.length === 1) s.client.event('web-1', 'Started', 'Started happened', Date.UTC(2026, 0, 1, 11, 0, 2));
      return original(after, m);
    };
    const done = s.run('events', '--follow', '--json', 'web-1');
    await flushMicrotasks();
    s.client.event('db-1', 'Created', 'not mine');
    s.client.event('web-1', 'ShutdownRequested', 'x', Date.UTC(2026, 0, 1, 11, 0, 3));
    await flushMicrotasks();
    s.abort.abort();
    expect(await done).toBe(0);
    expect(s.io.stdout.trimEnd().split('\n').map((l) => JSON.parse(l).sequence)).toEqual([1, 2, 4]);
    expect(s.client.calls.indexOf('subscribe')).toBeLessThan(s.client.calls.indexOf('listEventsSince 0'));
    expect(s.client.subscribers).toBe(0);
  });

  it('--follow carries on from the last sequence when the agent comes back, and fills a gap by listing', async () => {
    const s = setup();
    s.client.event('web-1', 'Created', 'a');
    const done = s.run('events', '-f', '--json');
    await flushMicrotasks();
    s.client.emit({ kind: 'agent-gone' });
    // Events while the agent restarted, no signal seen for the first of them.
    s.client.events.push({ ...e(5, 'web-1', 'Started'), sequence: 2, uid: '', call: '' });
    s.client.emit({ kind: 'agent-back' });
    await flushMicrotasks();
    s.client.event('web-1', 'Stopped', 'c');
    s.client.events.push({ ...e(6, 'web-1', 'Gap'), sequence: 4, uid: '', call: '' });
    s.client.event('web-1', 'AfterGap', 'd');
    await flushMicrotasks();
    s.abort.abort();
    expect(await done).toBe(0);
    expect(s.io.stdout.trimEnd().split('\n').map((l) => JSON.parse(l).sequence)).toEqual([1, 2, 3, 4, 5]);
    expect(s.io.stderr).toMatch(/went away after event 1; waiting/);
  });

  it('--follow ends with exit 6 and the resume cursor when its own connection breaks', async () => {
    const s = setup();
    s.client.event('web-1', 'Created', 'a');
    const done = s.run('events', '-f');
    await flushMicrotasks();
    s.client.emit({ kind: 'disconnected', reason: 'socket closed' });
    expect(await done).toBe(6);
    expect(s.io.stderr).toBe('vmkeeperctl: lost the D-Bus connection: socket closed (resume with --after 1)\n');
  });
});

describe('version', () => {
  it('prints client and agent versions', async () => {
    const s = setup();
    expect(await s.run('version')).toBe(0);
    expect(s.io.stdout).toBe('vmkeeperctl 0.1.0\nvmkeeperd 0.1.0 (running, libvirt test:///default connected)\n');
    const j = setup();
    await j.run('version', '--json');
    expect(JSON.parse(j.io.stdout)).toEqual({ client: '0.1.0', agent: { version: '0.1.0', state: 'running', libvirtUri: 'test:///default', libvirtConnected: true, drainState: 'none' } });
  });

  it('says when the host is drained', async () => {
    const s = setup();
    s.client.info = { ...s.client.info, drainState: 'drained' };
    expect(await s.run('version')).toBe(0);
    expect(s.io.stdout).toBe('vmkeeperctl 0.1.0\nvmkeeperd 0.1.0 (running, drained, libvirt test:///default connected)\n');
  });

  it('still prints the client version when the agent is not running', async () => {
    const s = setup();
    s.client.failWith = new DBusError('org.freedesktop.DBus.Error.ServiceUnknown', 'x');
    expect(await s.run('version')).toBe(6);
    expect(s.io.stdout).toBe('vmkeeperctl 0.1.0\n');
    expect(s.io.stderr).toBe('vmkeeperctl: vmkeeperd is not running (nobody owns org.vmkeeper1 on this bus)\n');
  });
});
