// The .rpm: rpmlint, a test install into an empty rpm database, its file list, flags, dependencies
// and scriptlets; and that the spec's scriptlets use the systemd rpm macros where they exist.
import { promises as fs } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REPO, buildPackages, must, run, skipReason, type BuiltPackages } from './packages.js';

const skip = skipReason();

describe.skipIf(skip)(`the .rpm${skip ? ` (skipped: ${skip})` : ''}`, () => {
  let pkgs: BuiltPackages;
  let dbpath: string;
  const q = (...args: string[]) => must('rpm', ['-qp', ...args, pkgs.rpm]);

  beforeAll(async () => {
    pkgs = await buildPackages();
    dbpath = await fs.mkdtemp(path.join(os.tmpdir(), 'vmkeeper-rpmdb-'));
    await must('rpm', ['--initdb', '--dbpath', dbpath]);
  }, 25 * 60_000);

  afterAll(async () => {
    if (dbpath) await fs.rm(dbpath, { recursive: true, force: true });
  });

  it('has no rpmlint errors', () => {
    expect(pkgs.rpmlint).toMatch(/^\s*\d+ packages and \d+ specfiles checked; 0 errors/m);
    expect(pkgs.rpmlint).not.toMatch(/^\S+: E: /m);
  });

  it('installs with rpm -i --nodeps --test, silently', async () => {
    // --force-debian: Debian's rpm otherwise prints a note suggesting alien.
    const r = await run('rpm', ['-i', '--nodeps', '--test', '--force-debian', '--dbpath', dbpath, pkgs.rpm]);
    expect(r.stderr.trim()).toBe('');
    expect(r.stdout.trim()).toBe('');
    expect(r.code).toBe(0);
  });

  it('carries version and release from package.json', async () => {
    const pkg = JSON.parse(await fs.readFile(path.join(REPO, 'package.json'), 'utf8'));
    expect((await q('--qf', '%{NAME} %{VERSION} %{RELEASE}')).trim()).toBe(`vmkeeper ${pkg.version} 1`);
    expect(await q('--changelog')).toContain(`- ${pkg.version}-1`);
  });

  it('installs the agent, runtime, unit, bus policy, config, sysusers, docs and man pages', async () => {
    const files = (await q('-l')).split('\n').filter(Boolean);
    for (const f of [
      '/usr/bin/vmkeeperd',
      '/usr/lib/vmkeeper/bin/node',
      '/usr/lib/vmkeeper/dist/main.js',
      '/usr/lib/vmkeeper/package.json',
      '/usr/lib/vmkeeper/node_modules/@unraid/libvirt/build/Release/libvirt.node',
      '/usr/lib/vmkeeper/node_modules/sd-notify/build/Release/notify.node',
      '/usr/lib/vmkeeper/node_modules/unix-dgram/build/Release/unix_dgram.node',
      '/usr/lib/vmkeeper/node_modules/dbus-next/package.json',
      '/usr/lib/systemd/system/vmkeeperd.service',
      '/usr/share/dbus-1/system.d/org.vmkeeper1.conf',
      '/usr/share/polkit-1/actions/org.vmkeeper1.policy',
      '/usr/share/polkit-1/rules.d/50-org.vmkeeper1.rules',
      '/etc/vmkeeper/config.yaml',
      '/usr/lib/sysusers.d/vmkeeper.conf',
      '/usr/share/doc/vmkeeper/README.md',
      '/usr/share/doc/vmkeeper/configuration.md',
      '/usr/share/doc/vmkeeper/installing.md',
      '/usr/share/licenses/vmkeeper/nodejs-LICENSE',
    ]) expect(files).toContain(f);
    expect(files.some((f) => /^\/usr\/share\/man\/man8\/vmkeeperd\.8(\.gz)?$/.test(f))).toBe(true);
    expect(files.some((f) => /^\/usr\/share\/man\/man5\/vmkeeper\.conf\.5(\.gz)?$/.test(f))).toBe(true);
    if (await exists(path.join(REPO, 'src', 'ctl', 'main.ts'))) {
      expect(files).toContain('/usr/bin/vmkeeperctl');
      expect(files.some((f) => /^\/usr\/share\/man\/man1\/vmkeeperctl\.1(\.gz)?$/.test(f))).toBe(true);
    }
    if (await exists(path.join(REPO, 'completions', 'vmkeeperctl.bash'))) {
      expect(files).toContain('/usr/share/bash-completion/completions/vmkeeperctl');
    }
    // No build leftovers, no tooling that only the build needs.
    expect(files.filter((f) => /\/node_modules\/(tsx|esbuild|node-gyp|\.bin|@mapbox\/node-pre-gyp)(\/|$)/.test(f))).toEqual([]);
    expect(files.filter((f) => /\/build\/Release\/obj\.target|\.(map|ts|cc|h)$/.test(f) && !f.endsWith('.d.ts'))).toEqual([]);
    expect(files.filter((f) => f.includes('/.inputs-hash'))).toEqual([]);
  });

  it('marks the config %config(noreplace) and the rest as plain files', async () => {
    const rows = (await q('--qf', '[%{FILEFLAGS:fflags} %{FILENAMES}\n]')).split('\n').filter(Boolean);
    const flags = (p: string) => rows.find((r) => r.endsWith(` ${p}`))?.split(' ')[0];
    expect(flags('/etc/vmkeeper/config.yaml')).toBe('cn');
    expect(flags('/usr/lib/systemd/system/vmkeeperd.service')).toBe('');
    expect((await q('-c')).trim().split('\n')).toEqual(['/etc/vmkeeper/config.yaml']);
  });

  it('requires the Red Hat family names and provides nothing from the bundled runtime', async () => {
    const requires = (await q('--requires')).split('\n').map((l) => l.trim()).filter(Boolean);
    for (const r of ['libvirt-daemon-driver-qemu', 'qemu-img', 'dbus', 'systemd']) expect(requires).toContain(r);
    // libvirt-libs through the addon's soname, as the Red Hat family does it.
    expect(requires).toContain('libvirt.so.0()(64bit)');
    expect(requires).toContain('libsystemd.so.0()(64bit)');
    expect(requires.filter((r) => /^\/usr\/bin\/(node|env)$|libnode/.test(r))).toEqual([]);
    const provides = (await q('--provides')).split('\n').map((l) => l.trim()).filter(Boolean);
    expect(provides.filter((p) => !/^(vmkeeper|vmkeeper\(x86-64\)|config\(vmkeeper\)) = /.test(p))).toEqual([]);
  });

  it('has scriptlets that add the user, enable+start on install, restart on upgrade, stop on erase', async () => {
    const scripts = await q('--scripts');
    const section = (name: string) => {
      const m = new RegExp(`^${name} scriptlet \\(using /bin/sh\\):\\n([\\s\\S]*?)(?=^\\w+ scriptlet|(?![\\s\\S]))`, 'm').exec(scripts);
      if (!m) throw new Error(`no ${name} scriptlet in:\n${scripts}`);
      return m[1]!;
    };
    const pre = section('preinstall');
    expect(pre).toMatch(/getent group vmkeeper .*\|\| groupadd -r vmkeeper/);
    expect(pre).toMatch(/useradd -r -g vmkeeper/);
    const post = section('postinstall');
    expect(post).toMatch(/if \[ "\$1" -eq 1 \][^\n]*\n\s*systemctl enable --now vmkeeperd\.service/);
    expect(post).toContain('ReloadConfig');
    const preun = section('preuninstall');
    // Stopping only on erase ($1 = 0), never on upgrade.
    expect(preun).toMatch(/if \[ "\$1" -eq 0 \][^\n]*\n\s*systemctl --no-reload disable --now vmkeeperd\.service/);
    expect(preun).not.toMatch(/^\s*systemctl (stop|disable)/m);
    const postun = section('postuninstall');
    expect(postun).toMatch(/if \[ "\$1" -ge 1 \]; then\s*\n\s*systemctl try-restart vmkeeperd\.service/);
    // State is removed on erase only when asked.
    expect(postun).toMatch(/\/etc\/vmkeeper\/purge-state/);
    expect(postun).toMatch(/VMKEEPER_PURGE_STATE/);
    expect(postun).toMatch(/if \[ "\$purge_state" = yes \]; then\s*\n\s*rm -rf \/var\/lib\/vmkeeper/);
    // The scriptlets are valid shell.
    for (const name of ['preinstall', 'postinstall', 'preuninstall', 'postuninstall']) {
      const r = await run('sh', ['-n', '-c', section(name)]);
      expect(r.stderr, name).toBe('');
    }
  });

  it('uses the systemd rpm macros where they are defined', async () => {
    const spec = path.join(dbpath, 'vmkeeper.spec');
    await fs.writeFile(spec, (await fs.readFile(path.join(REPO, 'packaging', 'rpm', 'vmkeeper.spec'), 'utf8')).replace('@VERSION@', pkgs.version));
    const parsed = await must('rpmspec', [
      '-P', spec,
      '--define', 'systemd_post() SYSTEMD_POST_MACRO %{*}',
      '--define', 'systemd_preun() SYSTEMD_PREUN_MACRO %{*}',
      '--define', 'systemd_postun_with_restart() SYSTEMD_POSTUN_RESTART_MACRO %{*}',
      '--define', '_unitdir /usr/lib/systemd/system',
    ]);
    expect(parsed).toContain('SYSTEMD_POST_MACRO vmkeeperd.service');
    expect(parsed).toContain('SYSTEMD_PREUN_MACRO vmkeeperd.service');
    expect(parsed).toContain('SYSTEMD_POSTUN_RESTART_MACRO vmkeeperd.service');
    expect(parsed).not.toContain('systemctl try-restart');
    // Fresh installs are still enabled and started (the macros only apply presets).
    expect(parsed).toContain('systemctl enable --now vmkeeperd.service');
  });
});

async function exists(p: string): Promise<boolean> {
  return fs.access(p).then(() => true, () => false);
}
