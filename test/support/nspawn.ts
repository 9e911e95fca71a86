/**
 * Real systemd for integration tests: a Debian 12 root built once with debootstrap and cached
 * under <repo>/.cache/nspawn/<hash of the package list>/root, then booted as throwaway writable
 * copies with `systemd-nspawn -b` (systemd as PID 1, logind, journald, D-Bus all real). A copy
 * can be booted again after it powered off (boot()), so a test can watch a host come back.
 *
 * Root only. Each booted container gets an overlayfs copy (lower = the cached root, upper =
 * a fresh directory), or a `cp -a --reflink=auto` copy where overlayfs is unavailable, so the
 * cache is never modified by a test. Commands run inside with `nsenter -t <container PID 1> -a`.
 * The cached root has a persistent journal (/var/log/journal exists), so journal() also works
 * after the container has powered off (it then reads the copy's journal files from the host).
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { closeSync, openSync, promises as fs } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
export const NSPAWN_CACHE_DIR = path.join(REPO_ROOT, '.cache', 'nspawn');
/** Bump when the recipe below changes, so stale cached roots are not reused. */
const RECIPE_VERSION = 2;
const BASE_PACKAGES = ['systemd', 'systemd-sysv', 'dbus'];
const CONTAINER_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

export interface ExecResult {
  code: number;
  stdout: string;
  stderr: string;
}

function run(cmd: string, args: string[], opts: { timeoutMs?: number; input?: string; env?: NodeJS.ProcessEnv } = {}): Promise<ExecResult> {
  return new Promise((resolve) => {
    const child = execFile(
      cmd,
      args,
      { timeout: opts.timeoutMs ?? 60_000, killSignal: 'SIGKILL', maxBuffer: 64 * 1024 * 1024, env: opts.env ?? process.env },
      (err, stdout, stderr) => {
        const e = err as (Error & { code?: unknown; killed?: boolean }) | null;
        const code = !e ? 0 : typeof e.code === 'number' ? e.code : -1;
        resolve({ code, stdout: String(stdout), stderr: String(stderr) + (e && code === -1 ? `\n${e.message}` : '') });
      },
    );
    if (opts.input !== undefined) child.stdin?.end(opts.input);
    else child.stdin?.end();
  });
}

async function must(cmd: string, args: string[], timeoutMs = 60_000): Promise<string> {
  const r = await run(cmd, args, { timeoutMs });
  if (r.code !== 0) throw new Error(`${cmd} ${args.join(' ')} failed (${r.code}): ${(r.stderr || r.stdout).slice(-3000)}`);
  return r.stdout;
}

const shq = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** The Debian mirror the host uses (deb822 .sources first, then one-line lists). */
async function hostDebianMirror(): Promise<string> {
  const files: string[] = [];
  const dir = '/etc/apt/sources.list.d';
  for (const f of (await fs.readdir(dir).catch(() => [] as string[])).sort()) files.push(path.join(dir, f));
  files.push('/etc/apt/sources.list');
  for (const f of files) {
    const text = await fs.readFile(f, 'utf8').catch(() => '');
    if (f.endsWith('.sources')) {
      for (const stanza of text.split(/\n\s*\n/)) {
        const uris = /^URIs:\s*(\S+)/m.exec(stanza)?.[1];
        const suites = /^Suites:\s*(.+)$/m.exec(stanza)?.[1] ?? '';
        if (uris && /\bbookworm\b/.test(suites) && !/security/.test(uris)) return uris;
      }
    } else {
      for (const line of text.split('\n')) {
        const m = /^\s*deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+bookworm\s/.exec(line);
        if (m && !/security/.test(m[1]!)) return m[1]!;
      }
    }
  }
  return 'http://deb.debian.org/debian';
}

async function ensureHostTools(): Promise<void> {
  const missing: string[] = [];
  if ((await run('sh', ['-c', 'command -v debootstrap'])).code !== 0) missing.push('debootstrap');
  if ((await run('sh', ['-c', 'command -v systemd-nspawn'])).code !== 0) missing.push('systemd-container');
  if (missing.length === 0) return;
  await must('apt-get', ['install', '-y', '--no-install-recommends', ...missing], 600_000);
}

/**
 * A cached Debian 12 root with systemd, dbus and `extraPackages` (installed with
 * --no-install-recommends). Cold: debootstrap (~40 s) plus the extras; warm: a stat.
 * Concurrent callers (other test files, other runs) are serialised with flock.
 */
export async function ensureDebianRoot(opts: { extraPackages?: string[] } = {}): Promise<string> {
  if (process.getuid?.() !== 0) throw new Error('ensureDebianRoot: must run as root');
  const extra = [...new Set(opts.extraPackages ?? [])].filter((p) => !BASE_PACKAGES.includes(p)).sort();
  const key = createHash('sha256').update(JSON.stringify({ v: RECIPE_VERSION, base: BASE_PACKAGES, extra })).digest('hex').slice(0, 16);
  const dir = path.join(NSPAWN_CACHE_DIR, key);
  const root = path.join(dir, 'root');
  const stamp = path.join(dir, 'stamp');
  if (await fs.access(stamp).then(() => true, () => false)) return root;

  await ensureHostTools();
  await fs.mkdir(dir, { recursive: true });
  await fs.writeFile(path.join(dir, 'packages.txt'), [...BASE_PACKAGES, ...extra].join('\n') + '\n');
  const mirror = await hostDebianMirror();
  const tmp = path.join(dir, 'root.tmp');
  const inRoot = (cmd: string) =>
    `systemd-nspawn -q -D ${shq(tmp)} --register=no --keep-unit --pipe -E DEBIAN_FRONTEND=noninteractive -E PATH=${CONTAINER_PATH} /bin/sh -c ${shq(cmd)} </dev/null`;
  const script = [
    'set -eu',
    `if [ -e ${shq(stamp)} ]; then exit 0; fi`,
    `rm -rf ${shq(tmp)}`,
    `debootstrap --variant=minbase --include=${BASE_PACKAGES.join(',')} bookworm ${shq(tmp)} ${shq(mirror)}`,
    // Keep package scripts from starting services inside the build chroot.
    `printf '#!/bin/sh\\nexit 101\\n' > ${shq(tmp)}/usr/sbin/policy-rc.d`,
    `chmod 755 ${shq(tmp)}/usr/sbin/policy-rc.d`,
    ...(extra.length
      ? [inRoot(`apt-get update -q && apt-get install -y -q --no-install-recommends ${extra.join(' ')} && apt-get clean`)]
      : []),
    `rm -f ${shq(tmp)}/usr/sbin/policy-rc.d`,
    // Persistent journal (readable after poweroff), a fixed hostname, no console getty.
    `mkdir -p ${shq(tmp)}/var/log/journal`,
    `echo vmkeeper-test > ${shq(tmp)}/etc/hostname`,
    `: > ${shq(tmp)}/etc/machine-id`,
    `ln -sf /dev/null ${shq(tmp)}/etc/systemd/system/console-getty.service`,
    `ln -sf /dev/null ${shq(tmp)}/etc/systemd/system/getty@.service`,
    `rm -rf ${shq(root)}`,
    `mv ${shq(tmp)} ${shq(root)}`,
    `touch ${shq(stamp)}`,
  ].join('\n');
  const lock = path.join(NSPAWN_CACHE_DIR, `${key}.lock`);
  const r = await run('flock', ['-w', '3600', lock, '/bin/sh', '-c', script], { timeoutMs: 3_600_000 });
  if (r.code !== 0) throw new Error(`building the Debian root in ${dir} failed (${r.code}):\n${r.stdout.slice(-2000)}\n${r.stderr.slice(-3000)}`);
  return root;
}

export interface BootedContainer {
  name: string;
  /** The container's (writable, throwaway) root directory as seen from the host. */
  root: string;
  /** Host PID of the container's systemd (PID 1 inside); a new one after boot(). */
  readonly leaderPid: number;
  exec(cmd: string[], opts?: { timeoutMs?: number; input?: string }): Promise<ExecResult>;
  /** Waits for `systemctl is-system-running` to say running/degraded; resolves with that word. */
  waitForSystemRunning(timeoutMs?: number): Promise<string>;
  /** The journal (all, or one unit), short-precise format; works after poweroff too. */
  journal(unit?: string): Promise<string>;
  /** `systemctl poweroff` inside, then waits for the container to end. */
  poweroff(timeoutMs?: number): Promise<void>;
  /** Whether systemd-nspawn is still running. */
  readonly running: boolean;
  /**
   * Boots the same copy again after a poweroff, as a host comes back: what the first boot wrote
   * (/var/lib, /etc, the journal) is still there. Resolves once PID 1 runs; then waitForSystemRunning.
   */
  boot(): Promise<void>;
  /** Kills the container if still running, unmounts and removes the copy. */
  stop(): Promise<void>;
}

export interface BootOptions {
  baseRoot: string;
  name: string;
  /** systemd-nspawn --bind= arguments (SRC[:DST[:OPTS]]). */
  bind?: string[];
  /** systemd-nspawn --bind-ro= arguments. */
  bindRo?: string[];
  /** Files written into the copy before boot: container path -> content (or content and mode). */
  files?: Record<string, string | { content: string; mode: number }>;
  /** Deadline for finding the container's PID 1. Default 30 s. */
  bootTimeoutMs?: number;
}

async function childPids(pid: number): Promise<number[]> {
  const tasks = await fs.readdir(`/proc/${pid}/task`).catch(() => [] as string[]);
  const out: number[] = [];
  for (const t of tasks) {
    const c = await fs.readFile(`/proc/${pid}/task/${t}/children`, 'utf8').catch(() => '');
    out.push(...c.split(/\s+/).filter(Boolean).map(Number));
  }
  return out;
}

async function isPidNamespaceInit(pid: number): Promise<boolean> {
  const status = await fs.readFile(`/proc/${pid}/status`, 'utf8').catch(() => '');
  const nspid = /^NSpid:\s*(.+)$/m.exec(status)?.[1]?.trim().split(/\s+/) ?? [];
  return nspid.length > 1 && nspid[nspid.length - 1] === '1';
}

export async function bootContainer(opts: BootOptions): Promise<BootedContainer> {
  if (process.getuid?.() !== 0) throw new Error('bootContainer: must run as root');
  if (!/^[a-zA-Z0-9-]{1,40}$/.test(opts.name)) throw new Error(`bootContainer: bad machine name ${opts.name}`);
  const runsDir = path.join(NSPAWN_CACHE_DIR, 'run');
  await fs.mkdir(runsDir, { recursive: true });
  const work = await fs.mkdtemp(path.join(runsDir, `${opts.name}-`));
  const root = path.join(work, 'root');
  await fs.mkdir(root);
  let overlay = false;
  {
    await fs.mkdir(path.join(work, 'upper'));
    await fs.mkdir(path.join(work, 'ovlwork'));
    const r = await run('mount', ['-t', 'overlay', 'overlay', '-o',
      `lowerdir=${opts.baseRoot},upperdir=${path.join(work, 'upper')},workdir=${path.join(work, 'ovlwork')}`, root]);
    overlay = r.code === 0;
    if (!overlay) await must('cp', ['-a', '--reflink=auto', `${opts.baseRoot}/.`, root], 600_000);
  }
  // A fresh machine id per copy keeps journal directories apart (boot() keeps it, as a host does).
  await fs.writeFile(path.join(root, 'etc', 'machine-id'), `${randomBytes(16).toString('hex')}\n`);
  for (const [p, file] of Object.entries(opts.files ?? {})) {
    const target = path.join(root, p);
    await fs.mkdir(path.dirname(target), { recursive: true });
    await fs.rm(target, { force: true }); // never write through a symlink of the base root
    const { content, mode } = typeof file === 'string' ? { content: file, mode: 0o644 } : file;
    await fs.writeFile(target, content, { mode });
    await fs.chmod(target, mode);
  }

  const logFile = path.join(work, 'nspawn.log');
  const cleanup = async () => {
    if (overlay) {
      for (let i = 0; i < 20; i++) {
        const r = await run('umount', [root]);
        if (r.code === 0 || /not mounted/.test(r.stderr)) break;
        await sleep(250);
      }
    }
    await fs.rm(work, { recursive: true, force: true });
  };

  // One systemd-nspawn run on the copy; boot() starts another on the same copy after a poweroff.
  let booted: Booted;
  try {
    booted = await launch(root, logFile, opts);
  } catch (err) {
    await cleanup();
    throw err;
  }

  const exec = (cmd: string[], o: { timeoutMs?: number; input?: string } = {}) =>
    run('nsenter', ['-t', String(booted.leaderPid), '-a', '--', 'env', '-i', `PATH=${CONTAINER_PATH}`, 'LANG=C.UTF-8', 'SYSTEMD_PAGER=', 'SYSTEMD_COLORS=0', ...cmd], {
      timeoutMs: o.timeoutMs ?? 60_000,
      input: o.input,
    });

  const container: BootedContainer = {
    name: opts.name,
    root,
    get leaderPid() {
      return booted.leaderPid;
    },
    exec,
    get running() {
      return !booted.exited;
    },
    async waitForSystemRunning(timeoutMs = 60_000) {
      const end = Date.now() + timeoutMs;
      let last = '';
      for (;;) {
        if (booted.exited) throw new Error('container exited while booting');
        const r = await exec(['systemctl', 'is-system-running', '--wait'], { timeoutMs: Math.max(1000, end - Date.now()) });
        last = r.stdout.trim() || r.stderr.trim();
        if (last === 'running' || last === 'degraded') return last;
        if (Date.now() > end) throw new Error(`system not running within ${timeoutMs} ms: ${last}`);
        await sleep(200);
      }
    },
    async journal(unit) {
      const filter = unit ? ['-u', unit] : [];
      if (!booted.exited) {
        const r = await exec(['journalctl', '--no-pager', '-o', 'short-precise', ...filter], { timeoutMs: 30_000 });
        return r.stdout;
      }
      const r = await run('journalctl', ['--no-pager', '-o', 'short-precise', '-D', path.join(root, 'var', 'log', 'journal'), ...filter], { timeoutMs: 30_000 });
      if (r.code === 0 && r.stdout.trim()) return r.stdout;
      const ids = await fs.readdir(path.join(root, 'var', 'log', 'journal')).catch(() => [] as string[]);
      let out = '';
      for (const id of ids) {
        const s = await run('journalctl', ['--no-pager', '-o', 'short-precise', '-D', path.join(root, 'var', 'log', 'journal', id), ...filter], { timeoutMs: 30_000 });
        out += s.stdout;
      }
      return out;
    },
    async poweroff(timeoutMs = 120_000) {
      if (booted.exited) return;
      await exec(['systemctl', 'poweroff', '--no-block'], { timeoutMs: 10_000 });
      let timer: NodeJS.Timeout | undefined;
      const timeout = new Promise<'timeout'>((resolve) => (timer = setTimeout(() => resolve('timeout'), timeoutMs)));
      const r = await Promise.race([booted.exitPromise.then(() => 'exited' as const), timeout]).finally(() => clearTimeout(timer));
      if (r === 'timeout') throw new Error(`container ${opts.name} did not power off within ${timeoutMs} ms`);
    },
    async boot() {
      if (!booted.exited) throw new Error(`container ${opts.name} is still running: power it off before booting it again`);
      booted = await launch(root, logFile, opts);
    },
    async stop() {
      if (!booted.exited) {
        // SIGKILL to the namespace's init takes every process of the container with it.
        try {
          process.kill(booted.leaderPid, 'SIGKILL');
        } catch {
          /* gone */
        }
        const t = setTimeout(() => booted.child.kill('SIGKILL'), 10_000);
        await booted.exitPromise;
        clearTimeout(t);
      }
      await cleanup();
    },
  };
  return container;
}

interface Booted {
  child: ChildProcess;
  exitPromise: Promise<void>;
  readonly exited: boolean;
  leaderPid: number;
}

/** Runs systemd-nspawn -b on root and waits for the container's PID 1 to appear. */
async function launch(root: string, logFile: string, opts: BootOptions): Promise<Booted> {
  const logFd = openSync(logFile, 'a');
  let child: ChildProcess;
  try {
    // --console=read-only, not passive: with passive nobody drains the console pty, and once its
    // buffer is full PID 1 blocks writing a status line (seen at poweroff with a few guests).
    // read-only forwards the console to nspawn.log and reads no input.
    child = spawn('systemd-nspawn', [
      '-b', '-D', root, '--register=no', '--keep-unit', '-M', opts.name, '--console=read-only',
      ...(opts.bind ?? []).map((b) => `--bind=${b}`),
      ...(opts.bindRo ?? []).map((b) => `--bind-ro=${b}`),
    ], { stdio: ['ignore', logFd, logFd], detached: true });
  } finally {
    closeSync(logFd);
  }
  let exited = false;
  const exitPromise = new Promise<void>((resolve) => {
    child.once('exit', () => ((exited = true), resolve()));
    child.once('error', () => ((exited = true), resolve()));
  });
  const nspawnPid = child.pid ?? -1;
  const deadline = Date.now() + (opts.bootTimeoutMs ?? 30_000);
  for (;;) {
    if (exited) {
      const log = await fs.readFile(logFile, 'utf8').catch(() => '');
      throw new Error(`systemd-nspawn exited during boot:\n${log.slice(-3000)}`);
    }
    for (const c of await childPids(nspawnPid)) {
      if (await isPidNamespaceInit(c)) {
        return { child, exitPromise, get exited() { return exited; }, leaderPid: c };
      }
    }
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      await exitPromise;
      throw new Error('container PID 1 not found in time');
    }
    await sleep(50);
  }
}
