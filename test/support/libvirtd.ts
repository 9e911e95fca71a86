/**
 * A private libvirtd for integration tests (root only).
 *
 * Approach chosen: a PRIVATE daemon, never the host's system instance.
 *
 * libvirtd's qemu driver, when privileged, uses compiled-in paths (/etc/libvirt/qemu.conf,
 * /run/libvirt, /var/lib/libvirt, /var/log/libvirt, /var/cache/libvirt) that no option can move.
 * So the daemon is started inside its own mount namespace (`unshare --mount --propagation
 * private`) in which:
 *   - /run is a fresh tmpfs (hides the host's /run/libvirt sockets, D-Bus and systemd, so the
 *     private daemon never talks to the host's libvirtd, virtlogd or systemd-machined),
 *   - /run/libvirt, /etc/libvirt, /var/lib/libvirt, /var/log/libvirt and /var/cache/libvirt are
 *     bind mounts of directories under runDir.
 * Its client socket lives in runDir (libvirtd.conf `unix_sock_dir`), no TCP/TLS listener
 * (`--listen` is not passed), and the URI is `qemu:///system?socket=<runDir>/sock/libvirt-sock`.
 * Nothing on the host is changed except that the empty mount-point directories
 * /etc/libvirt, /var/{lib,log,cache}/libvirt are created if they do not exist yet.
 * A system libvirtd already running on the host keeps running untouched and cannot see these
 * guests (nor they its).
 *
 * The private qemu.conf runs qemu as root:root, without a security driver, without cgroups
 * (`cgroup_controllers = [ ]`, works in containers and without systemd), without a private /dev
 * namespace for qemu, and with `stdio_handler = "file"` (qemu's stdout/stderr go straight to
 * <runDir>/log/qemu/<name>.log, so no virtlogd is needed). libvirtd insists that its compiled-in
 * qemu account (libvirt-qemu, normally created by libvirt-daemon-system) exists before it even
 * reads qemu.conf; if the host lacks it, the namespace gets bind-mounted copies of /etc/passwd
 * and /etc/group that add it (the host's files are not modified).
 *
 * Needs: root, util-linux `unshare`, and the packages libvirt-daemon, libvirt-daemon-driver-qemu,
 * libvirt-clients (virsh), qemu-system-x86 (install with --no-install-recommends).
 *
 * stop(): destroys every domain still running on the private daemon, stops libvirtd (SIGTERM,
 * then SIGKILL), and finally kills any qemu left behind whose pid file is in runDir.
 */
import { spawn, execFile, type ChildProcess } from 'node:child_process';
import { promises as fs, openSync, closeSync } from 'node:fs';
import path from 'node:path';
import { waitFor } from './wait.js';

export interface PrivateLibvirtd {
  /** Connection URI for virsh / the libvirt binding. */
  uri: string;
  /** PID of the libvirtd process. */
  pid: number;
  /** libvirtd's own log (stderr + log_outputs). */
  logFile: string;
  stop(): Promise<void>;
}

export interface StartLibvirtdOptions {
  /** Absolute directory for config, sockets, state and logs. Short: socket paths max 107 bytes. */
  runDir: string;
  /** Readiness deadline; the first start probes qemu capabilities (~7.5 s). Default 60 s. */
  readyTimeoutMs?: number;
  /**
   * Optional persistent directory used as the daemon's /var/cache/libvirt, so that the qemu
   * capability probe (~7 s) is done once and reused by later starts (libvirt revalidates the
   * cache against the qemu binary and libvirtd itself). Default: runDir/cache (probe every start).
   */
  cacheDir?: string;
}

interface ExecResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

function run(cmd: string, args: string[], timeoutMs: number): Promise<ExecResult> {
  return new Promise((resolve) => {
    execFile(cmd, args, { timeout: timeoutMs, killSignal: 'SIGKILL' }, (err, stdout, stderr) => {
      const code = err ? (typeof (err as { code?: unknown }).code === 'number' ? (err as { code: number }).code : -1) : 0;
      resolve({ code, stdout: String(stdout), stderr: String(stderr) });
    });
  });
}

/** Run virsh against a URI; resolves with its result (never rejects). */
export function virsh(uri: string, args: string[], timeoutMs = 30_000): Promise<ExecResult> {
  return run('virsh', ['-q', '-c', uri, ...args], timeoutMs);
}

class EarlyExit extends Error {}

function libvirtdConf(runDir: string): string {
  return [
    `unix_sock_dir = "${runDir}/sock"`,
    'unix_sock_group = "root"',
    'unix_sock_ro_perms = "0770"',
    'unix_sock_rw_perms = "0770"',
    'unix_sock_admin_perms = "0700"',
    'auth_unix_ro = "none"',
    'auth_unix_rw = "none"',
    'listen_tls = 0',
    'listen_tcp = 0',
    'log_level = 3',
    `log_outputs = "3:file:${runDir}/log/libvirtd.log"`,
    '',
  ].join('\n');
}

const QEMU_CONF = [
  'user = "root"',
  'group = "root"',
  'dynamic_ownership = 0',
  'remember_owner = 0',
  'security_driver = "none"',
  'cgroup_controllers = [ ]',
  'namespaces = [ ]',
  'stdio_handler = "file"',
  'vnc_auto_unix_socket = 0',
  '',
].join('\n');

// Directories that the privileged qemu driver hard-codes, each replaced by runDir/<sub>.
const BINDS: Array<[sub: string, target: string]> = [
  ['etc', '/etc/libvirt'],
  ['run', '/run/libvirt'],
  ['lib', '/var/lib/libvirt'],
  ['log', '/var/log/libvirt'],
  ['cache', '/var/cache/libvirt'],
];

function shq(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

export async function startLibvirtd(opts: StartLibvirtdOptions): Promise<PrivateLibvirtd> {
  if (process.getuid?.() !== 0) throw new Error('startLibvirtd: must run as root');
  const runDir = path.resolve(opts.runDir);
  const sockDir = path.join(runDir, 'sock');
  const sock = path.join(sockDir, 'libvirt-sock');
  if (Buffer.byteLength(sock) > 107) throw new Error(`startLibvirtd: runDir too long for a unix socket: ${sock}`);
  const readyTimeoutMs = opts.readyTimeoutMs ?? 60_000;
  // Paths under /run or the bind targets would be hidden inside the daemon's namespace.
  for (const p of [runDir, ...(opts.cacheDir ? [path.resolve(opts.cacheDir)] : [])]) {
    for (const hidden of ['/run', '/var/run', ...BINDS.map(([, t]) => t)]) {
      if (p === hidden || p.startsWith(`${hidden}/`)) {
        throw new Error(`startLibvirtd: ${p} lies under ${hidden}, which the private daemon replaces`);
      }
    }
  }

  await fs.mkdir(runDir, { recursive: true });
  await fs.chmod(runDir, 0o755);
  for (const sub of ['sock', 'etc', 'run', 'lib', 'log', 'log/qemu', 'cache']) {
    await fs.mkdir(path.join(runDir, sub), { recursive: true });
  }
  const cacheDir = opts.cacheDir ? path.resolve(opts.cacheDir) : path.join(runDir, 'cache');
  await fs.mkdir(cacheDir, { recursive: true });
  const bindSource = (sub: string) => (sub === 'cache' ? cacheDir : path.join(runDir, sub));
  await fs.writeFile(path.join(runDir, 'etc', 'libvirtd.conf'), libvirtdConf(runDir));
  await fs.writeFile(path.join(runDir, 'etc', 'qemu.conf'), QEMU_CONF);
  // An empty client config inside the namespace (the daemon itself never reads it).
  await fs.writeFile(path.join(runDir, 'etc', 'libvirt.conf'), '');

  const pidFile = path.join(runDir, 'libvirtd.pid');
  const logFile = path.join(runDir, 'log', 'libvirtd.stderr.log');
  const script = [
    'set -e',
    // Mount points on the host (empty dirs) for the bind mounts; harmless if they exist.
    `mkdir -p ${BINDS.filter(([, t]) => !t.startsWith('/run/')).map(([, t]) => shq(t)).join(' ')}`,
    'mount -t tmpfs -o mode=0755 vmkeeper-test-run /run',
    'mkdir -p /run/libvirt',
    ...BINDS.map(([sub, target]) => `mount --bind ${shq(bindSource(sub))} ${shq(target)}`),
    // libvirtd resolves its compiled-in qemu user/group (Debian: libvirt-qemu) before it reads
    // qemu.conf and refuses to start if they do not exist. Without libvirt-daemon-system that
    // account is missing, so give the namespace its own /etc/passwd and /etc/group with it.
    `if ! grep -q '^libvirt-qemu:' /etc/passwd || ! grep -q '^libvirt-qemu:' /etc/group; then`,
    `  cp /etc/passwd ${shq(path.join(runDir, 'passwd'))}; cp /etc/group ${shq(path.join(runDir, 'group'))}`,
    `  grep -q '^libvirt-qemu:' /etc/passwd || echo 'libvirt-qemu:x:64055:64055:Libvirt Qemu (vmkeeper tests):/var/lib/libvirt:/usr/sbin/nologin' >> ${shq(path.join(runDir, 'passwd'))}`,
    `  grep -q '^libvirt-qemu:' /etc/group || echo 'libvirt-qemu:x:64055:' >> ${shq(path.join(runDir, 'group'))}`,
    `  mount --bind ${shq(path.join(runDir, 'passwd'))} /etc/passwd; mount --bind ${shq(path.join(runDir, 'group'))} /etc/group`,
    'fi',
    `exec libvirtd --config ${shq(path.join(runDir, 'etc', 'libvirtd.conf'))} --pid-file ${shq(pidFile)}`,
  ].join('\n');

  const logFd = openSync(logFile, 'a');
  let child: ChildProcess;
  try {
    child = spawn('unshare', ['--mount', '--propagation', 'private', '--', '/bin/sh', '-c', script], {
      stdio: ['ignore', logFd, logFd],
      env: { ...process.env, LC_ALL: 'C' },
    });
  } finally {
    closeSync(logFd);
  }
  let exited: { code: number | null; signal: NodeJS.Signals | null } | null = null;
  const exitPromise = new Promise<void>((resolve) => {
    child.once('exit', (code, signal) => {
      exited = { code, signal };
      resolve();
    });
    child.once('error', () => {
      exited = exited ?? { code: -1, signal: null };
      resolve();
    });
  });

  const uri = `qemu:///system?socket=${sock}`;
  const readLog = async () => {
    const a = await fs.readFile(logFile, 'utf8').catch(() => '');
    const b = await fs.readFile(path.join(runDir, 'log', 'libvirtd.log'), 'utf8').catch(() => '');
    return `${a}\n${b}`.trim().split('\n').slice(-30).join('\n');
  };

  const stop = async (): Promise<void> => {
    if (!exited) {
      const list = await virsh(uri, ['list', '--name', '--state-running', '--state-paused', '--state-other'], 10_000);
      if (list.code === 0) {
        for (const name of list.stdout.split('\n').map((s) => s.trim()).filter(Boolean)) {
          await virsh(uri, ['destroy', name], 15_000);
        }
      }
      child.kill('SIGTERM');
      const t = setTimeout(() => child.kill('SIGKILL'), 10_000);
      await exitPromise;
      clearTimeout(t);
    }
    await killLeftoverQemu(path.join(runDir, 'run', 'qemu'));
  };

  let lastError = '';
  try {
    await waitFor(
      async () => {
        if (exited) throw new EarlyExit(`libvirtd exited early (${JSON.stringify(exited)}):\n${await readLog()}`);
        const r = await virsh(uri, ['version'], 10_000);
        lastError = r.stderr.trim();
        return r.code === 0;
      },
      { timeoutMs: readyTimeoutMs, intervalMs: 200, what: 'libvirtd to answer', rethrow: (e) => e instanceof EarlyExit },
    );
  } catch (err) {
    if (err instanceof EarlyExit) throw err;
    await stop().catch(() => undefined);
    throw new Error(`libvirtd not ready within ${readyTimeoutMs} ms: ${lastError}\n${await readLog()}`);
  }
  return { uri, pid: child.pid ?? -1, logFile, stop };
}

/** SIGKILL qemu processes whose libvirt pid files are in `dir` (only if they are really qemu). */
async function killLeftoverQemu(dir: string): Promise<void> {
  const entries = await fs.readdir(dir).catch(() => [] as string[]);
  for (const e of entries.filter((n) => n.endsWith('.pid'))) {
    const pid = Number.parseInt((await fs.readFile(path.join(dir, e), 'utf8').catch(() => '')).trim(), 10);
    if (!Number.isInteger(pid) || pid <= 1) continue;
    const cmdline = await fs.readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '');
    if (!cmdline.includes('qemu-system')) continue;
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      /* already gone */
    }
  }
}
