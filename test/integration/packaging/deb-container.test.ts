// The .deb on a stock Debian 12 booted with systemd (nspawn): lintian, install with apt (pulling
// its dependencies from Debian's archive), the service, the bus policy, systemd-analyze, an
// upgrade that keeps a real qemu guest running, remove and purge.
//
// The container root is cached (.cache/nspawn) with libvirt-daemon-system, the qemu driver and
// qemu-system-x86 preinstalled, so the proof drives the host's real default, qemu:///system,
// with a real guest: an emulated (TCG) machine without a bootable disk, whose firmware keeps
// looking for one, is a running qemu process that an upgrade must not touch. qemu-utils (and
// whatever else the package needs) is NOT preinstalled: apt has to fetch it from the archive.
import { promises as fs } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { machineObjectPath } from '../../../src/machine/names.js';
import { bootContainer, ensureDebianRoot, type BootedContainer } from '../../support/nspawn.js';
import { waitFor } from '../../support/wait.js';
import { buildPackages, buildUpgradePackages, must, skipReason, type BuiltPackages } from './packages.js';

const skip = skipReason();
const ROOT_PACKAGES = ['libvirt-daemon-system', 'libvirt-daemon-driver-qemu', 'qemu-system-x86'];
const APT_ENV = ['env', 'DEBIAN_FRONTEND=noninteractive'];
const BUS = ['busctl', '--system'];
const MANAGER = ['org.vmkeeper1', '/org/vmkeeper1', 'org.vmkeeper1.Manager'];
const GUEST_SPEC = JSON.stringify({ cpus: 1, memoryMiB: 64, domainType: 'qemu', disks: [{ name: 'root', sizeGiB: 1 }] });

describe.skipIf(skip)(`the .deb in a booted Debian 12${skip ? ` (skipped: ${skip})` : ''}`, () => {
  let pkgs: BuiltPackages;
  let next: BuiltPackages;
  let root: string;
  let ct: BootedContainer | undefined;
  let debFiles: string[] = [];

  const sh = (script: string, timeoutMs = 60_000) => ct!.exec(['sh', '-c', script], { timeoutMs });
  const ok = async (script: string, timeoutMs = 60_000) => {
    const r = await sh(script, timeoutMs);
    if (r.code !== 0) throw new Error(`in the container: ${script}\nexit ${r.code}\n${r.stdout.slice(-3000)}\n${r.stderr.slice(-3000)}`);
    return r.stdout;
  };
  const active = async () => (await sh('systemctl is-active vmkeeperd.service')).stdout.trim();
  const mainPid = async () => (await ok('systemctl show -P MainPID vmkeeperd.service')).trim();
  const machineState = async (name: string) => {
    const out = await ok(`busctl --system get-property org.vmkeeper1 ${machineObjectPath(name)} org.vmkeeper1.Machine State`);
    return /^s "(.*)"$/.exec(out.trim())?.[1];
  };
  const qemuPid = async () => (await sh('cat /run/libvirt/qemu/vmkeeper-keep-1.pid')).stdout.trim();
  const aptInstall = (deb: string) => ok(`${APT_ENV.join(' ')} apt-get install -y -q ${deb}`, 900_000);

  beforeAll(async () => {
    [pkgs, next, root] = await Promise.all([
      buildPackages(),
      buildUpgradePackages(),
      ensureDebianRoot({ extraPackages: ROOT_PACKAGES }),
    ]);
    debFiles = (await must('sh', ['-c', `dpkg-deb -c '${pkgs.deb}' | awk '{print $6}'`]))
      .split('\n')
      .map((l) => l.replace(/^\./, ''))
      .filter((l) => l && !l.endsWith('/'));
    // libvirt inside a container must not try to manage cgroups. qemu keeps Debian's default
    // user (libvirt-qemu): the agent's guests/ folders are 0711 so it can reach its disks.
    const qemuConf = await fs.readFile(path.join(root, 'etc', 'libvirt', 'qemu.conf'), 'utf8');
    ct = await bootContainer({
      baseRoot: root,
      name: 'vmkeeper-pkg',
      bindRo: [`${pkgs.dir}:/pkgs`, `${next.dir}:/pkgs-next`],
      files: { '/etc/libvirt/qemu.conf': `${qemuConf}\ncgroup_controllers = [ ]\n` },
    });
    await ct.waitForSystemRunning(120_000);
  }, 40 * 60_000);

  afterAll(async () => {
    if (ct) {
      if (process.env.VMKEEPER_TEST_DEBUG) console.log(await ct.journal('vmkeeperd.service'));
      await ct.stop();
    }
  });

  it('lintian: no errors, no warnings, every override explained', async () => {
    expect(pkgs.lintian.split('\n').filter((l) => /^[EW]: /.test(l))).toEqual([]);
    const overrides = await must('sh', ['-c', `dpkg-deb --fsys-tarfile '${pkgs.deb}' | tar -xOf - ./usr/share/lintian/overrides/vmkeeper`]);
    const lines = overrides.split('\n');
    lines.forEach((line, i) => {
      if (line.startsWith('vmkeeper:')) {
        let j = i - 1;
        while (j >= 0 && lines[j]!.startsWith('vmkeeper:')) j--;
        expect(lines[j], `override "${line}" needs a comment above it`).toMatch(/^#/);
      }
    });
  });

  it('declares its dependencies with Debian names and marks the config a conffile', async () => {
    const depends = (await must('dpkg-deb', ['-f', pkgs.deb, 'Depends'])).trim();
    for (const d of ['libvirt0', 'libvirt-daemon-system', 'dbus', 'qemu-utils', 'systemd']) expect(depends).toMatch(new RegExp(`(^|, )${d}( |,|$)`));
    expect(depends).not.toMatch(/nodejs/);
    expect((await must('dpkg-deb', ['-f', pkgs.deb, 'Version'])).trim()).toBe(pkgs.version);
    const conffiles = await must('sh', ['-c', `dpkg-deb --ctrl-tarfile '${pkgs.deb}' | tar -xOf - ./conffiles`]);
    expect(conffiles.trim().split('\n')).toEqual(['/etc/vmkeeper/config.yaml']);
    for (const f of ['/usr/bin/vmkeeperd', '/usr/lib/vmkeeper/bin/node', '/lib/systemd/system/vmkeeperd.service',
      '/usr/share/dbus-1/system.d/org.vmkeeper1.conf', '/usr/lib/sysusers.d/vmkeeper.conf',
      '/usr/share/polkit-1/actions/org.vmkeeper1.policy', '/usr/share/polkit-1/rules.d/50-org.vmkeeper1.rules', '/usr/share/man/man8/vmkeeperd.8.gz',
      '/usr/share/man/man5/vmkeeper.conf.5.gz', '/usr/share/doc/vmkeeper/installing.md.gz', '/usr/share/doc/vmkeeper/copyright']) {
      expect(debFiles).toContain(f);
    }
  });

  it('installs with apt on a stock Debian 12, pulling its dependencies from the archive', async () => {
    expect((await sh('dpkg-query -W -f=\'${Status}\' qemu-utils')).stdout).not.toContain('install ok installed');
    expect((await sh('command -v node')).code).not.toBe(0); // no Node.js on the target besides the package's
    await ok('apt-get update -q', 300_000);
    const out = await aptInstall(`/pkgs/${path.basename(pkgs.deb)}`);
    expect(out).toMatch(/Unpacking qemu-utils/);
    expect((await ok("dpkg-query -W -f='${Status} ${Version}' vmkeeper")).trim()).toBe(`install ok installed ${pkgs.version}`);
    expect((await ok('getent group vmkeeper')).trim()).toMatch(/^vmkeeper:x:\d+:/);
    expect((await ok('getent passwd vmkeeper')).trim()).toMatch(/^vmkeeper:x:\d+:\d+:/);
  }, 900_000);

  it('enables and starts the service, which serves org.vmkeeper1 on the system bus', async () => {
    await waitFor(async () => (await active()) === 'active', { timeoutMs: 60_000, what: 'vmkeeperd active' });
    expect((await ok('systemctl is-enabled vmkeeperd.service')).trim()).toBe('enabled');
    expect((await ok('vmkeeperd --version')).trim()).toMatch(/^vmkeeperd \d+\.\d+\.\d+/);
    const list = await waitFor(async () => {
      const r = await sh([...BUS, 'call', ...MANAGER, 'ListMachines'].join(' '));
      return r.code === 0 ? r.stdout : undefined;
    }, { timeoutMs: 30_000, what: 'ListMachines' });
    expect(list.trim()).toBe('a(ssso) 0');
    // It runs with the bundled runtime.
    expect((await ok(`readlink /proc/${await mainPid()}/exe`)).trim()).toBe('/usr/lib/vmkeeper/bin/node');
  }, 120_000);

  it('systemd-analyze verify prints nothing for the installed unit; security exposure is recorded', async () => {
    const r = await sh('systemd-analyze verify /lib/systemd/system/vmkeeperd.service 2>&1');
    expect(r.stdout.trim()).toBe('');
    const sec = await sh('systemd-analyze security --offline=true /lib/systemd/system/vmkeeperd.service 2>&1 | tail -n 1');
    const exposure = Number(/Overall exposure level for vmkeeperd\.service: ([\d.]+)/.exec(sec.stdout)?.[1]);
    console.log(`systemd-analyze security --offline=true: exposure ${exposure}`);
    expect(exposure).toBeLessThanOrEqual(4.0);
  });

  it('denies changes to a non-root user outside group vmkeeper, and lets the group in', async () => {
    const create = `call ${MANAGER.join(' ')} CreateMachine ss denied-1 '{"cpus":1,"memoryMiB":64,"disks":[]}'`;
    const denied = await sh(`setpriv --reuid=nobody --regid=nogroup --clear-groups busctl --system ${create} 2>&1`);
    expect(denied.code).not.toBe(0);
    expect(denied.stdout).toMatch(/Access denied|AccessDenied/i);
    const read = await sh(`setpriv --reuid=nobody --regid=nogroup --clear-groups busctl --system call ${MANAGER.join(' ')} ListMachines`);
    expect(read.stdout.trim()).toBe('a(ssso) 0');
    // A member of group vmkeeper may call (this one fails on the spec, not on the policy).
    await ok('useradd -M -G vmkeeper opsuser');
    const member = await sh(`setpriv --reuid=opsuser --regid=opsuser --init-groups busctl --system call ${MANAGER.join(' ')} CreateMachine ss Bad_Name '{}' 2>&1`);
    expect(member.stdout).not.toMatch(/Access denied|AccessDenied/i);
    expect(member.stdout).toMatch(/InvalidName|name/i);
  });

  it('polkitd (a dependency of libvirt-daemon-system) knows the shipped actions and decides: the shipped rule lets a member in, a local rule keeps it out', async () => {
    expect((await ok("dpkg-query -W -f='${Status}' polkitd")).trim()).toBe('install ok installed');
    const actions = await ok('pkaction');
    for (const a of ['create-machine', 'delete-machine', 'set-power', 'set-annotations']) expect(actions).toContain(`org.vmkeeper1.${a}`);
    // Bad_Name: a call polkit lets through fails on the name, one it refuses never gets there.
    // dbus-send, not busctl: sd-bus shows every AccessDenied as just "Access denied".
    const memberCreate = 'setpriv --reuid=opsuser --regid=opsuser --init-groups dbus-send --system --print-reply --dest=org.vmkeeper1 ' +
      "/org/vmkeeper1 org.vmkeeper1.Manager.CreateMachine string:Bad_Name 'string:{}' 2>&1";
    expect((await sh(memberCreate)).stdout).toMatch(/org\.vmkeeper1\.Error\.InvalidName/);
    await ok(`cat > /etc/polkit-1/rules.d/40-vmkeeper-local.rules <<'EOF'
polkit.addRule(function (action, subject) {
  if (action.id === "org.vmkeeper1.create-machine" && subject.user === "opsuser") return polkit.Result.NO;
});
EOF`);
    const refusal = await waitFor(async () => {
      const out = (await sh(memberCreate)).stdout;
      if (!/org\.freedesktop\.DBus\.Error\.AccessDenied: not authorized for org\.vmkeeper1\.create-machine/.test(out)) throw new Error(`still: ${out.trim()}`);
      return out;
    }, { timeoutMs: 30_000, intervalMs: 500, what: 'polkitd to obey the local rule' }).catch(async (err: unknown) => {
      const agentLog = (await sh('journalctl -q -u vmkeeperd.service -u polkit.service --no-pager | tail -n 30')).stdout;
      throw new Error(`${err instanceof Error ? err.message : String(err)}\n${agentLog}`);
    });
    expect(refusal).not.toMatch(/InvalidName/); // refused before the name was looked at
    await ok('rm /etc/polkit-1/rules.d/40-vmkeeper-local.rules');
    await waitFor(async () => /InvalidName/.test((await sh(memberCreate)).stdout), { timeoutMs: 30_000, intervalMs: 500, what: 'the local rule gone' });
  }, 900_000);

  let record: { metadata?: unknown; spec?: unknown; [k: string]: unknown };
  let guestPid = '';

  it('runs a real guest through qemu:///system', async () => {
    await ok(`busctl --system call ${MANAGER.join(' ')} CreateMachine ss keep-1 '${GUEST_SPEC}'`);
    await waitFor(async () => (await machineState('keep-1')) === 'running', { timeoutMs: 90_000, intervalMs: 500, what: 'keep-1 running' });
    expect((await ok('virsh -c qemu:///system domstate vmkeeper-keep-1')).trim()).toBe('running');
    guestPid = await qemuPid();
    expect(guestPid).toMatch(/^\d+$/);
    const described = await ok(`busctl --system --json=short call ${MANAGER.join(' ')} DescribeMachine s keep-1`);
    record = JSON.parse(JSON.parse(described).data[0]);
  }, 120_000);

  it('logs keep-1\'s events with structured journal fields through the shipped unix-dgram addon', async () => {
    expect(debFiles).toContain('/usr/lib/vmkeeper/node_modules/unix-dgram/build/Release/unix_dgram.node');
    const entries = async () => (await ok('journalctl -u vmkeeperd.service VMKEEPER_MACHINE=keep-1 -o json --no-pager'))
      .split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Record<string, string>);
    await waitFor(async () => (await entries()).some((e) => e.VMKEEPER_REASON === 'Started'), { timeoutMs: 30_000, intervalMs: 500, what: 'keep-1 Started in the journal' });
    const reasons = (await entries()).map((e) => e.VMKEEPER_REASON);
    expect(reasons[0], reasons.join(', ')).toBe('Created');
    expect(reasons.indexOf('Started'), reasons.join(', ')).toBeGreaterThan(0);
    expect((await ok('journalctl -u vmkeeperd.service --no-pager')).includes('structured fields off')).toBe(false);
  }, 60_000);

  it('upgrades to a newer build: the agent restarts, the guest keeps running, its record is intact, the edited config is kept', async () => {
    await ok(`sed -i 's/^  level: info$/  level: debug/' /etc/vmkeeper/config.yaml && grep -q '^  level: debug$' /etc/vmkeeper/config.yaml`);
    await ok('systemctl restart vmkeeperd.service');
    await waitFor(async () => (await active()) === 'active', { timeoutMs: 60_000, what: 'vmkeeperd active after the config change' });
    const pidBefore = await mainPid();
    expect(await qemuPid()).toBe(guestPid);

    const out = await aptInstall(`/pkgs-next/${path.basename(next.deb)}`);
    expect(out).toMatch(new RegExp(`Unpacking vmkeeper \\(${next.version.replace(/\./g, '\\.')}\\) over \\(${pkgs.version.replace(/\./g, '\\.')}\\)`));
    expect((await ok("dpkg-query -W -f='${Version}' vmkeeper")).trim()).toBe(next.version);
    await waitFor(async () => (await active()) === 'active', { timeoutMs: 60_000, what: 'vmkeeperd active after the upgrade' });
    expect(await mainPid()).not.toBe(pidBefore); // restarted onto the new files
    expect(await qemuPid()).toBe(guestPid); // the same qemu process: never stopped
    expect((await ok('virsh -c qemu:///system domstate vmkeeper-keep-1')).trim()).toBe('running');
    await waitFor(async () => (await machineState('keep-1')) === 'running', { timeoutMs: 30_000, what: 'keep-1 running after the upgrade' });
    const described = await ok(`busctl --system --json=short call ${MANAGER.join(' ')} DescribeMachine s keep-1`);
    const after = JSON.parse(JSON.parse(described).data[0]);
    expect(after.metadata).toEqual(record.metadata);
    expect(after.spec).toEqual(record.spec);
    const events = await ok(`busctl --system call ${MANAGER.join(' ')} ListEvents`);
    expect(events).not.toMatch(/ShutdownRequested|ForceStopped/);
    expect(await ok('cat /etc/vmkeeper/config.yaml')).toMatch(/^ {2}level: debug$/m);
    expect((await ok('ls /etc/vmkeeper')).trim()).toBe('config.yaml'); // no .dpkg-dist: the conffile did not change
  }, 900_000);

  it('remove stops the service and leaves guests running; purge leaves nothing of the package', async () => {
    await ok(`${APT_ENV.join(' ')} apt-get remove -y -q vmkeeper`, 300_000);
    expect(await active()).not.toBe('active');
    expect(await qemuPid()).toBe(guestPid);
    expect((await ok('ls /etc/vmkeeper')).trim()).toBe('config.yaml'); // remove keeps the conffile

    await ok(`${APT_ENV.join(' ')} apt-get purge -y -q vmkeeper`, 300_000);
    expect((await sh('dpkg-query -W -f=\'${Status}\' vmkeeper')).stdout).not.toMatch(/installed|config-files/);
    const left = await ok(`for f in ${debFiles.join(' ')}; do [ -e "$f" ] || [ -L "$f" ] && echo "$f"; done; true`);
    expect(left.trim()).toBe('');
    for (const p of ['/etc/vmkeeper', '/usr/lib/vmkeeper', '/etc/systemd/system/multi-user.target.wants/vmkeeperd.service',
      '/var/lib/systemd/deb-systemd-helper-enabled/vmkeeperd.service.dsh-also',
      '/var/lib/systemd/deb-systemd-helper-enabled/multi-user.target.wants/vmkeeperd.service']) {
      expect((await sh(`test -e ${p} || test -L ${p}`)).code, p).not.toBe(0);
    }
    expect((await sh('systemctl cat vmkeeperd.service')).code).not.toBe(0);
    // Documented: state stays unless asked for, and so do the system user and group.
    expect((await sh('test -d /var/lib/vmkeeper/machines')).code).toBe(0);
    expect((await sh('getent group vmkeeper')).code).toBe(0);
  }, 600_000);

  it('purge removes the state when /etc/vmkeeper/purge-state asks for it', async () => {
    await aptInstall(`/pkgs/${path.basename(pkgs.deb)}`);
    await waitFor(async () => (await active()) === 'active', { timeoutMs: 60_000, what: 'vmkeeperd active after reinstall' });
    // The record survived remove+purge and the reinstalled agent adopts the still running guest.
    await waitFor(async () => (await machineState('keep-1')) === 'running', { timeoutMs: 60_000, what: 'keep-1 adopted' });
    await ok('virsh -c qemu:///system destroy vmkeeper-keep-1 >/dev/null; true');
    await ok('touch /etc/vmkeeper/purge-state');
    await ok(`${APT_ENV.join(' ')} apt-get purge -y -q vmkeeper`, 300_000);
    expect((await sh('test -e /var/lib/vmkeeper')).code).not.toBe(0);
    expect((await sh('test -e /etc/vmkeeper')).code).not.toBe(0);
  }, 600_000);
});
