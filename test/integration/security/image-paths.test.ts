import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { chmod, mkdir, readdir, readFile, stat, symlink, utimes, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MANAGER_PATH as MANAGER, domainNameFor } from '../../../src/machine/names.js';
import { startAgent } from '../../support/agent-process.js';
import { dbusSend, ensureUserInGroup, type RunAs } from '../../support/busctl.js';
import { startSystemBus } from '../../support/dbus-daemon.js';
import { waitFor } from '../../support/wait.js';
import { isRoot, listMachines, startRig, type Rig } from '../reliability/helpers.js';

// Issue 15, item 1: a member of group vmkeeper (allowed to create machines) points image paths at
// host files through links, a backing chain and a FIFO. Each is refused by name; no record, no
// domain, no disk; the host files are neither changed nor read (their atime stays two days old,
// which relatime would move on any read); other clients keep being answered; the agent stays up.

const run = promisify(execFile);
const M = 'org.vmkeeper1.Manager';
const SENTINEL = 'sentinel-host-content';
const TWO_DAYS_AGO = new Date(Date.now() - 2 * 86_400_000);

interface Attack {
  name: string;
  spec: Record<string, unknown>;
  /** The field and reason the InvalidSpec message must carry. */
  refusal: RegExp;
}

describe.skipIf(!isRoot)('security: image paths from a member of group vmkeeper', () => {
  let rig: Rig;
  let member: RunAs;
  let images: string;
  let host: string;
  const disk = (image: string) => ({ cpus: 1, memoryMiB: 64, power: 'off', disks: [{ name: 'root', image }] });
  const boot = (kernel: string, initrd?: string) => ({ cpus: 1, memoryMiB: 64, power: 'off', boot: { kernel, ...(initrd ? { initrd } : {}) } });
  const create = (name: string, spec: object) =>
    dbusSend(rig.bus.address, MANAGER, `${M}.CreateMachine`, [`string:${name}`, `string:${JSON.stringify(spec)}`], { as: member });

  /**
   * Mode, owner, size and times of the files the attacks aim at. Access times only for the test's
   * own host files: the host's daemons may read /etc/shadow at any moment.
   */
  const hostState = async () => {
    const files = ['/etc/shadow', '/etc/passwd', path.join(host, 'secret'), host];
    const stats = await Promise.all(files.map((f) => stat(f)));
    return stats.map((s, i) => {
      const atime = files[i]!.startsWith(host) ? ` a${s.atimeMs}` : '';
      return `${files[i]} ${s.mode} ${s.uid}:${s.gid} ${s.size}${atime} m${s.mtimeMs} c${s.ctimeMs}`;
    });
  };

  beforeAll(async () => {
    member = await ensureUserInGroup('vmkeeper-test', 'vmkeeper');
    rig = await startRig({
      prefix: 'vmk-sec-images-',
      startBus: () => startSystemBus(),
      config: { pollIntervalMs: 200, logLevel: 'debug' },
      prepare: async (dir) => {
        await chmod(dir, 0o755);
        images = path.join(dir, 'images');
        host = path.join(dir, 'host');
        await mkdir(host);
        await writeFile(path.join(host, 'secret'), SENTINEL);
        await utimes(path.join(host, 'secret'), TWO_DAYS_AGO, TWO_DAYS_AGO);
        await symlink('/etc/shadow', path.join(images, 'shadow'));
        await symlink(path.join(host, 'secret'), path.join(images, 'secret'));
        await symlink('/etc', path.join(images, 'etcdir'));
        await run('mkfifo', [path.join(images, 'fifo')]);
        const qemuImg = (...args: string[]) => run('qemu-img', ['create', '-q', '-f', 'qcow2', ...args]);
        await qemuImg(path.join(images, 'base.qcow2'), '16M');
        await qemuImg('-b', path.join(images, 'base.qcow2'), '-F', 'qcow2', path.join(images, 'good.qcow2'));
        await qemuImg('-u', '-b', '/etc/shadow', '-F', 'raw', path.join(images, 'shadow-backed.qcow2'), '16M');
        await qemuImg('-u', '-b', path.join(host, 'secret'), '-F', 'raw', path.join(images, 'secret-backed.qcow2'), '16M');
        await qemuImg('-u', '-b', path.join(images, 'fifo'), '-F', 'raw', path.join(images, 'fifo-backed.qcow2'), '16M');
        await qemuImg('-u', '-b', path.join(images, 'shadow-backed.qcow2'), '-F', 'qcow2', path.join(images, 'deep.qcow2'), '16M');
        await utimes(host, TWO_DAYS_AGO, TWO_DAYS_AGO);
      },
    });
  }, 60_000);

  afterAll(() => rig?.stop());

  it('refuses each planted path by name, stores and writes nothing, reads no host file, and keeps answering', async () => {
    const attacks: Attack[] = [
      { name: 'link-to-shadow', spec: disk(path.join(images, 'shadow')), refusal: /"disks\[0\]\.image": it resolves to a path outside the image directories/ },
      { name: 'link-kernel', spec: boot(path.join(images, 'secret')), refusal: /"boot\.kernel": it resolves to a path outside/ },
      { name: 'dir-link', spec: boot(path.join(images, 'base.qcow2'), path.join(images, 'etcdir', 'passwd')), refusal: /"boot\.initrd": it resolves to a path outside/ },
      { name: 'backing-shadow', spec: disk(path.join(images, 'shadow-backed.qcow2')), refusal: /"disks\[0\]\.image": backing file 1 resolves to a path outside/ },
      { name: 'backing-secret', spec: disk(path.join(images, 'secret-backed.qcow2')), refusal: /"disks\[0\]\.image": backing file 1 resolves to a path outside/ },
      { name: 'backing-deep', spec: disk(path.join(images, 'deep.qcow2')), refusal: /"disks\[0\]\.image": backing file 2 resolves to a path outside/ },
      { name: 'fifo', spec: disk(path.join(images, 'fifo')), refusal: /"disks\[0\]\.image": it is a FIFO, not a regular file/ },
      { name: 'backing-fifo', spec: disk(path.join(images, 'fifo-backed.qcow2')), refusal: /"disks\[0\]\.image": backing file 1 is a FIFO/ },
    ];
    const before = await hostState();

    // Root's reads keep running while the attacks are answered.
    let attacking = true;
    const latencies: number[] = [];
    const reader = (async () => {
      while (attacking) {
        const started = performance.now();
        await listMachines(rig.client, 5_000);
        latencies.push(performance.now() - started);
      }
    })();
    const outcomes = [];
    for (const attack of attacks) outcomes.push({ attack, out: await create(attack.name, attack.spec) });
    attacking = false;
    await reader;

    for (const { attack, out } of outcomes) {
      expect(out.errorName, attack.name).toBe('org.vmkeeper1.Error.InvalidSpec');
      expect(out.message, attack.name).toMatch(attack.refusal);
      expect(out.message, attack.name).not.toContain(SENTINEL);
      expect(out.message, attack.name).not.toMatch(/root:/);
    }
    expect(await listMachines(rig.client)).toEqual([]);
    expect(await readdir(path.join(rig.opts.stateDir, 'guests')).catch(() => [])).toEqual([]);
    expect(await hostState()).toEqual(before);
    expect(latencies.length).toBeGreaterThan(0);
    expect(Math.max(...latencies)).toBeLessThan(1000);
    expect(rig.agent!.child.exitCode).toBeNull();

    // The control: an image whose whole chain stays inside is accepted, and its overlay is made.
    const good = await create('good', disk(path.join(images, 'good.qcow2')));
    expect(good.ok ? 'ok' : `${good.errorName}: ${good.message}`).toBe('ok');
    const overlay = path.join(rig.opts.stateDir, 'guests', 'good', 'disk-root.qcow2');
    await waitFor(() => stat(overlay).then(() => true), { timeoutMs: 20_000, what: 'the overlay of the accepted image' });
    console.log(`image-paths: ${attacks.length} attacks refused; root's ListMachines max ${Math.max(...latencies).toFixed(0)} ms over ${latencies.length} calls`);
  });

  // Root editing the state dir (a restore, a hand edit): a record whose image path passes the
  // text check but is a link to /etc/shadow. It is loaded, and never gets a disk or a domain.
  it('never acts on a planted record whose image is a link to a host file', async () => {
    const before = await hostState();
    const machines = path.join(rig.opts.stateDir, 'machines');
    const seed = JSON.parse(await readFile(path.join(machines, 'good.json'), 'utf8')) as Record<string, any>;
    await rig.agent!.stop();
    const planted = {
      ...seed,
      name: 'planted',
      uuid: randomUUID(),
      domainName: domainNameFor('planted'),
      spec: { ...seed.spec, power: 'on', disks: [{ name: 'root', image: path.join(images, 'shadow') }] },
      status: { ...seed.status, state: 'pending', message: '' },
    };
    await writeFile(path.join(machines, 'planted.json'), JSON.stringify(planted));
    rig.agent = await startAgent(rig.opts);

    const describe = async () => {
      const out = await dbusSend(rig.bus.address, MANAGER, `${M}.DescribeMachine`, ['string:planted']);
      return out.ok ? out.stdout : `${out.errorName}: ${out.message}`;
    };
    const refused = await waitFor(async () => /disks\[0\]\.image\W{1,4} it resolves to a path outside/.test(await describe()), {
      timeoutMs: 20_000,
      what: 'the planted record to be refused by the image check',
    }).catch(async (err) => {
      throw new Error(`${(err as Error).message}\nDescribe: ${await describe()}\n${rig.agent!.output().slice(-3000)}`);
    });
    expect(refused).toBe(true);
    expect(await describe()).not.toMatch(/"state":"running"/);
    await expect(stat(path.join(rig.opts.stateDir, 'guests', 'planted', 'disk-root.qcow2'))).rejects.toThrow(/ENOENT/);
    expect(await hostState()).toEqual(before);
    expect(rig.agent.child.exitCode).toBeNull();
  });
});
