import { execFile } from 'node:child_process';
import { mkdir, readFile, readdir, stat, symlink, truncate, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { domainNameFor } from '../../../src/machine/names.js';
import type { MachineRecord } from '../../../src/machine/record.js';
import { spawnAgent, type AgentProcess } from '../../support/agent-process.js';
import { startSystemBus } from '../../support/dbus-daemon.js';
import { virsh } from '../../support/libvirtd.js';
import { waitFor } from '../../support/wait.js';
import { makeRecord } from '../../support/records.js';
import { isRoot, listMachines, manager, startRig, type Rig } from '../reliability/helpers.js';

// Issue 15, item 4: root (or a restore from backup) edits the state dir. Each planted file is
// quarantined with a reason that quotes none of its content, start-up is not held up, the
// foreign libvirt domain a record names is never touched, nothing outside the state and image
// dirs is written or chmodded, and the good records are served.

const run = promisify(execFile);
const MARKER = `vmksec${process.pid}x`;
const FOREIGN_DOMAIN = `foreign-${MARKER}`;
const START_BOUND_MS = 30_000;

/** A valid record (as the agent writes them) for this rig's image dir; `changes` spoil it. */
const record = (name: string, changes: Partial<MachineRecord> = {}, spec: Record<string, unknown> = {}) =>
  JSON.stringify(
    makeRecord(name, {
      spec: { cpus: 1, memoryMiB: 64, domainType: 'qemu', disks: [{ name: 'root', sizeGiB: 1 }], nics: [], power: 'off', ...spec },
      ...changes,
    }),
  );

/** Mode, owner, size and times of every entry under root except the skipped folders, one line each. */
async function tree(root: string, skip: string[]): Promise<string[]> {
  const prune = skip.flatMap((p) => ['-path', p, '-prune', '-o']);
  const { stdout } = await run('find', [root, ...prune, '-printf', '%p %m %U:%G %s %T@ %C@\\n'], { maxBuffer: 1 << 24 });
  return stdout.split('\n').filter(Boolean).sort();
}

describe.skipIf(!isRoot)('security: a tampered state dir (root editing machines/)', () => {
  let rig: Rig;
  let agent: AgentProcess | undefined;
  let uri: string;
  let machines: string;
  let startMs = 0;
  // What a planted image path or disk name aims at outside the rig (/tmp itself changes with
  // every other program: only entries carrying the marker count there).
  const shadowState = async () => {
    const s = await stat('/etc/shadow');
    return `/etc/shadow ${s.mode} ${s.uid}:${s.gid} ${s.size} ${s.mtimeMs} ${s.ctimeMs}`;
  };
  const strays = async () => (await readdir('/tmp')).filter((f) => f.includes(MARKER));
  let outside: () => Promise<string[]>;

  // File name -> how it is planted and the reason its quarantine must give.
  const planted: Record<string, { plant: (file: string) => Promise<unknown>; reason: RegExp }> = {
    'fifo.json': { plant: (f) => run('mkfifo', [f]), reason: /^not a regular file \(a FIFO\)$/ },
    'zero.json': { plant: (f) => symlink('/dev/zero', f), reason: /^is a symbolic link$/ },
    'shadowlink.json': { plant: (f) => symlink('/etc/shadow', f), reason: /^is a symbolic link$/ },
    'sparse.json': { plant: async (f) => (await writeFile(f, '{'), truncate(f, 1024 ** 3)), reason: /^larger than 1048576 bytes/ },
    'foreign.json': {
      // Marked for deletion: the agent of old destroyed and undefined the domain it named.
      plant: (f) => writeFile(f, record('foreign', { domainName: FOREIGN_DOMAIN, deletionTimestamp: Date.now() - 60_000 })),
      reason: /^domainName: must be "vmkeeper-foreign", derived from the name$/,
    },
    'shadow.json': { plant: (f) => writeFile(f, record('shadow', {}, { disks: [{ name: 'root', image: '/etc/shadow' }] })), reason: /^spec\.disks\[0\]\.image: must lie inside an image directory/ },
    'escape.json': {
      // guests/escape/disk-<name>.qcow2 resolves to /tmp/<marker>.qcow2 (disk names are at most 32 characters).
      plant: (f) => writeFile(f, record('escape', {}, { disks: [{ name: `../../../../../${MARKER}`, sizeGiB: 1 }] })),
      reason: /^spec\.disks\[0\]\.name: must match/,
    },
  };

  beforeAll(async () => {
    rig = await startRig({
      prefix: 'vmk-sec-state-',
      libvirtd: true,
      startBus: () => startSystemBus(),
      config: { pollIntervalMs: 200, sweepIntervalSec: 1, logLevel: 'debug' },
      startAgent: false,
    });
    uri = rig.libvirtd!.uri;
    machines = path.join(rig.opts.stateDir, 'machines');
    await mkdir(machines, { recursive: true, mode: 0o700 });
    for (const [file, { plant }] of Object.entries(planted)) await plant(path.join(machines, file));
    await writeFile(path.join(machines, 'good.json'), record('good'));
    await writeFile(path.join(machines, 'gone.json'), record('gone'));
    const xml = path.join(rig.dir, 'foreign.xml');
    await writeFile(xml, `<domain type='qemu'><name>${FOREIGN_DOMAIN}</name><memory unit='MiB'>64</memory><vcpu>1</vcpu><os><type>hvm</type></os></domain>`);
    const defined = await virsh(uri, ['define', xml]);
    expect(defined.code, defined.stderr).toBe(0);
    // libvirtd keeps its own files in lv/: it is not the agent.
    const skip = [rig.opts.stateDir, rig.opts.imageDir, path.join(rig.dir, 'lv')];
    outside = async () => [...(await tree(rig.dir, skip)), await shadowState()];
  }, 120_000);

  afterAll(async () => {
    await agent?.stop();
    await virsh(uri, ['undefine', FOREIGN_DOMAIN]);
    await rig?.stop();
  });

  it('quarantines each planted file by reason, leaves the foreign domain and the host alone, serves the rest', async () => {
    const before = await outside();
    const foreignBefore = (await virsh(uri, ['domstate', FOREIGN_DOMAIN])).stdout.trim();
    const shadowHead = (await readFile('/etc/shadow', 'utf8')).slice(0, 12);

    const started = performance.now();
    agent = spawnAgent(rig.opts);
    await agent.ready(START_BOUND_MS);
    startMs = performance.now() - started;

    // The sweeper has run a full pass once a deletion made now completes; the reconciler once the
    // good machine's domain is defined. Only then is "the foreign domain untouched" worth checking.
    expect((await manager(rig.client, 'DeleteMachineWithGracePeriod', 'su', ['gone', 0])).ok).toBe(true);
    await waitFor(async () => !(await listMachines(rig.client)).some((m) => m[0] === 'gone'), { timeoutMs: 30_000, what: 'the deletion of "gone"' });
    await waitFor(async () => (await virsh(uri, ['domstate', domainNameFor('good')])).code === 0, { timeoutMs: 30_000, what: 'the domain of "good"' });

    const got = await manager(rig.client, 'GetMachine', 's', ['good']);
    expect(got.ok ? got.body : got.message).toEqual(['/org/vmkeeper1/machine/good']);
    expect((await listMachines(rig.client)).map((m) => m[0])).toEqual(['good']);

    const log = agent.output();
    const quarantined = await readdir(path.join(rig.opts.stateDir, 'quarantine'));
    for (const [file, { reason }] of Object.entries(planted)) {
      expect(quarantined.filter((q) => q.startsWith(`${file}.`)), `${file} moved to quarantine/`).toHaveLength(1);
      const lines = log.split('\n').filter((l) => l.includes('quarantined a damaged machine record') && l.includes(path.join(machines, file)));
      expect(lines, `${file} logged once`).toHaveLength(1);
      const logged = /reason=("(?:[^"\\]|\\.)*"|\S+)/.exec(lines[0]!)?.[1];
      expect(logged && (logged.startsWith('"') ? JSON.parse(logged) : logged), `${file} reason`).toMatch(reason);
    }
    // The reconciler may be rewriting good.json right now (its status follows the domain), and
    // an atomic write shows a .tmp- file for a moment: wait for the folder to settle, with a
    // deadline, so a temporary file the agent leaves behind still fails the test.
    const settled = async () => (await readdir(machines)).sort().join(',') === 'good.json';
    await waitFor(settled, { timeoutMs: 10_000, what: 'machines/ to hold only good.json' }).catch(() => undefined);
    expect((await readdir(machines)).sort()).toEqual(['good.json']);
    // No content of any planted file reaches the log: not /etc/shadow's first bytes, not the marker.
    expect(log).not.toContain(shadowHead);
    expect(log.replaceAll(FOREIGN_DOMAIN, '')).not.toContain(MARKER);

    expect((await virsh(uri, ['domstate', FOREIGN_DOMAIN])).stdout.trim(), 'the foreign domain is untouched').toBe(foreignBefore);
    expect(await outside()).toEqual(before);
    expect(await strays()).toEqual([]);
    expect(agent.child.exitCode).toBeNull();
    console.log(`state-dir: ${Object.keys(planted).length} planted files quarantined; start to answering ${startMs.toFixed(0)} ms`);
  }, 120_000);
});
