/**
 * vmkeeperd under real systemd: a booted Debian 12 container (test/support/nspawn.ts) with
 * libvirt + qemu inside and the agent installed from this tree (dist/ + node_modules/, bound
 * read-only at /opt/vmkeeper, the host's Node 20 at /usr/local/bin/node). The unit file, tmpfiles
 * entry and D-Bus policy are the real ones from systemd/ and config/; a drop-in only shortens the
 * watchdog.
 */
import { promises as fs } from 'node:fs';
import path from 'node:path';
import { bootContainer, ensureDebianRoot, NSPAWN_CACHE_DIR, type BootedContainer, type ExecResult } from '../../support/nspawn.js';
import { ensureGuestImages, GUEST_CACHE_DIR, READY_LINE, REPO_ROOT, waitForSerialLine } from '../../support/guest-images.js';
import { waitFor } from '../../support/wait.js';

const SYSTEMD_TEST_PACKAGES = ['libvirt-clients', 'libvirt-daemon-driver-qemu', 'libvirt-daemon-system', 'qemu-system-x86', 'qemu-utils'];
const IMAGES = '/srv/guest-images';
export const isRoot = process.getuid?.() === 0;

export interface AgentContainerOptions {
  name: string;
  hostShutdownTimeoutSec?: number;
  /** hostShutdown.groups (default: none, one group with the whole timeout). */
  hostShutdownGroups?: Array<{ minPriority: number; budgetSec: number }>;
  /** restore.parallelism and restore.delaySec (defaults: the agent's). */
  restore?: { parallelism?: number; delaySec?: number };
  watchdogSec?: number;
  /** Extra [Service] lines for the test drop-in. */
  serviceExtra?: string[];
}

export interface AgentContainer {
  c: BootedContainer;
  sh(script: string, timeoutMs?: number): Promise<ExecResult>;
  busctl(args: string[]): Promise<ExecResult>;
  /** A Manager method over the container's system bus; resolves with busctl's JSON "data" (throws on an error reply). */
  managerCall(method: string, signature?: string, args?: Array<string | number>): Promise<unknown[]>;
  managerState(): Promise<string>;
  mainPid(): Promise<number>;
  /** CreateMachine with a 96 MiB test guest; `extra` adds spec fields (e.g. hostShutdownAction). */
  createGuest(name: string, mode: 'acpi' | 'ignore', extra?: Record<string, unknown>): Promise<void>;
  waitGuestReady(name: string, mode: 'acpi' | 'ignore', timeoutMs?: number): Promise<void>;
  /** The guest's serial log as seen from the host (readable after poweroff too). */
  serialLog(name: string): string;
  /** Runs our libvirt adapter inside the container (as the agent would): save or restore. */
  adapter(op: 'save', domain: string, file: string): Promise<ExecResult>;
  adapter(op: 'restore', file: string): Promise<ExecResult>;
  /** Boots the powered-off container again from the same root and waits for systemd. */
  bootAgain(timeoutMs?: number): Promise<void>;
  domState(name: string): Promise<string>;
  qemuPid(name: string): Promise<number>;
  stop(): Promise<void>;
}

/** Our libvirt adapter from the built tree, run by the container's node: `save DOMAIN FILE` or `restore FILE`. */
const ADAPTER_SCRIPT = `
const { LibvirtHypervisor } = await import('/opt/vmkeeper/dist/hypervisor/libvirt/libvirt-hypervisor.js');
const { systemClock } = await import('/opt/vmkeeper/dist/lifecycle/clock.js');
const { silentLogger } = await import('/opt/vmkeeper/dist/logging/logger.js');
const [op, a, b] = process.argv.slice(1);
const hv = new LibvirtHypervisor({ uri: 'qemu:///system', callTimeoutMs: 10000, logger: silentLogger, clock: systemClock });
await hv.connect();
const t0 = Date.now();
if (op === 'save') await hv.saveDomain(a, b, 60000);
else await hv.restoreDomain(a, 60000);
console.log(op + ' ' + (Date.now() - t0) + ' ms');
await hv.close();
`;

async function buildTree(): Promise<void> {
  await fs.access(path.join(REPO_ROOT, 'dist', 'main.js')).catch(() => {
    throw new Error('dist/main.js missing: run `npm run build` first');
  });
}

function configYaml(o: AgentContainerOptions): string {
  return [
    'bus: system',
    'libvirt:',
    '  uri: qemu:///system',
    '  callTimeoutSec: 10',
    'imageDirectories:',
    `  - ${IMAGES}`,
    'defaultDomainType: qemu',
    'machines:',
    '  sweepIntervalSec: 2',
    '  shutdownRetryIntervalSec: 3',
    '  pollIntervalMs: 500',
    'hostShutdown:',
    '  action: shutdown',
    `  timeoutSec: ${o.hostShutdownTimeoutSec ?? 15}`,
    '  parallelism: 8',
    '  onServiceStop: leave',
    ...(o.hostShutdownGroups?.length
      ? ['  groups:', ...o.hostShutdownGroups.map((g) => `    - {minPriority: ${g.minPriority}, budgetSec: ${g.budgetSec}}`)]
      : []),
    ...(o.restore
      ? ['restore:',
        ...(o.restore.parallelism !== undefined ? [`  parallelism: ${o.restore.parallelism}`] : []),
        ...(o.restore.delaySec !== undefined ? [`  delaySec: ${o.restore.delaySec}`] : [])]
      : []),
    'log:',
    '  level: debug',
    '',
  ].join('\n');
}

/**
 * Builds what every boot shares (the Debian root with libvirt, the guest images): minutes on a
 * fresh machine, so a suite calls it in beforeAll, never inside a test's own timeout.
 */
export async function prepareAgentContainers(): Promise<string> {
  await buildTree();
  await ensureGuestImages();
  return ensureDebianRoot({ extraPackages: SYSTEMD_TEST_PACKAGES });
}

export async function bootAgentContainer(o: AgentContainerOptions): Promise<AgentContainer> {
  const baseRoot = await prepareAgentContainers();
  const read = (p: string) => fs.readFile(path.join(REPO_ROOT, p), 'utf8');
  // libvirt's qemu capability probe (~7 s) is cached across boots of the same base root.
  const libvirtCache = path.join(NSPAWN_CACHE_DIR, 'libvirt-cache');
  await fs.mkdir(libvirtCache, { recursive: true });
  const c = await bootContainer({
    baseRoot,
    name: o.name,
    // Only the built tree: binding the whole repo would show the container its own root (under
    // .cache/nspawn/run) and give its shutdown thousands of mounts to unwind.
    bindRo: [
      '/usr/bin/node:/usr/local/bin/node',
      `${REPO_ROOT}/dist:/opt/vmkeeper/dist`,
      `${REPO_ROOT}/node_modules:/opt/vmkeeper/node_modules`,
      `${GUEST_CACHE_DIR}:${IMAGES}`,
    ],
    bind: [`${libvirtCache}:/var/cache/libvirt`],
    files: {
      '/opt/vmkeeper/package.json': await read('package.json'),
      '/usr/bin/vmkeeperd': { content: '#!/bin/sh\nexec /usr/local/bin/node /opt/vmkeeper/dist/main.js "$@"\n', mode: 0o755 },
      '/usr/bin/vmkeeperctl': { content: '#!/bin/sh\nexec /usr/local/bin/node /opt/vmkeeper/dist/ctl/main.js "$@"\n', mode: 0o755 },
      '/etc/systemd/system/vmkeeperd.service': await read('systemd/vmkeeperd.service'),
      '/etc/systemd/system/vmkeeperd.service.d/test.conf': [
        '[Service]',
        `WatchdogSec=${o.watchdogSec ?? 6}s`,
        ...(o.serviceExtra ?? []),
        '',
      ].join('\n'),
      '/usr/lib/tmpfiles.d/vmkeeperd.conf': await read('systemd/vmkeeperd.tmpfiles'),
      '/etc/dbus-1/system.d/org.vmkeeper1.conf': await read('config/org.vmkeeper1.conf'),
      // Where the packages put them: the container's polkitd (libvirt pulls it in) decides in "auto".
      '/usr/share/polkit-1/actions/org.vmkeeper1.policy': await read('config/org.vmkeeper1.policy'),
      '/usr/share/polkit-1/rules.d/50-org.vmkeeper1.rules': await read('config/50-org.vmkeeper1.rules'),
      '/etc/vmkeeper/config.yaml': configYaml(o),
      // Containers have no cgroup controllers to delegate to libvirt.
      '/etc/libvirt/qemu.conf': 'cgroup_controllers = [ ]\n',
    },
  });
  const boot = async (timeoutMs: number) => {
    await c.waitForSystemRunning(timeoutMs);
    const tmp = await c.exec(['systemd-tmpfiles', '--create', '/usr/lib/tmpfiles.d/vmkeeperd.conf']);
    if (tmp.code !== 0) throw new Error(`systemd-tmpfiles: ${tmp.stderr}`);
    await c.exec(['systemctl', 'daemon-reload']);
  };
  try {
    await boot(60_000);
  } catch (err) {
    await c.stop();
    throw err;
  }
  const sh = (script: string, timeoutMs = 60_000) => c.exec(['/bin/sh', '-c', script], { timeoutMs });
  const busctl = (args: string[]) => c.exec(['busctl', '--system', ...args], { timeoutMs: 20_000 });
  const serialLog = (name: string) => path.join(c.root, 'var/lib/vmkeeper/guests', name, 'serial.log');
  const ac: AgentContainer = {
    c,
    sh,
    busctl,
    async managerCall(method, signature = '', args = []) {
      const r = await busctl(['--json=short', 'call', 'org.vmkeeper1', '/org/vmkeeper1', 'org.vmkeeper1.Manager', method, ...(signature ? [signature, ...args.map(String)] : [])]);
      if (r.code !== 0) throw new Error(`${method}: ${r.stderr.trim()}`);
      return (JSON.parse(r.stdout) as { data: unknown[] }).data;
    },
    async managerState() {
      const r = await busctl(['get-property', 'org.vmkeeper1', '/org/vmkeeper1', 'org.vmkeeper1.Manager', 'State']);
      return r.code === 0 ? JSON.parse(r.stdout.trim().replace(/^s /, '')) as string : `error: ${r.stderr.trim()}`;
    },
    async mainPid() {
      const r = await c.exec(['systemctl', 'show', '-P', 'MainPID', 'vmkeeperd']);
      return Number(r.stdout.trim());
    },
    async createGuest(name, mode, extra = {}) {
      const spec = {
        cpus: 1,
        memoryMiB: 96,
        domainType: 'qemu',
        boot: { kernel: `${IMAGES}/vmlinuz`, initrd: `${IMAGES}/initrd-${mode}.img`, cmdline: 'console=ttyS0' },
        gracePeriodSec: 30,
        ...extra,
      };
      const r = await busctl(['call', 'org.vmkeeper1', '/org/vmkeeper1', 'org.vmkeeper1.Manager', 'CreateMachine', 'ss', name, JSON.stringify(spec)]);
      if (r.code !== 0) throw new Error(`CreateMachine ${name}: ${r.stderr}`);
    },
    async waitGuestReady(name, mode, timeoutMs = 90_000) {
      const log = serialLog(name);
      await waitFor(() => fs.access(log).then(() => true, () => false), { timeoutMs: 30_000, intervalMs: 200, what: `${log} to appear` });
      await waitForSerialLine(log, READY_LINE(mode), timeoutMs);
    },
    async domState(name) {
      const r = await c.exec(['virsh', '-q', '-c', 'qemu:///system', 'domstate', `vmkeeper-${name}`]);
      return r.code === 0 ? r.stdout.trim() : `error: ${r.stderr.trim()}`;
    },
    async qemuPid(name) {
      const r = await c.exec(['cat', `/run/libvirt/qemu/vmkeeper-${name}.pid`]);
      return Number(r.stdout.trim()) || 0;
    },
    serialLog,
    adapter: (...args: string[]) =>
      c.exec(['/usr/local/bin/node', '--input-type=module', '-e', ADAPTER_SCRIPT, ...args], { timeoutMs: 120_000 }),
    async bootAgain(timeoutMs = 60_000) {
      await c.boot();
      await boot(timeoutMs);
    },
    stop: () => c.stop(),
  };
  return ac;
}
