// Shared by the packaging tests: builds the packages (cached by a hash of the inputs inside
// packaging/build-packages.sh, so a warm run only re-checks), and an "upgrade" build of the same
// tree with a bumped version, made in a temporary copy under .cache/packaging/upgrade.
import { execFile } from 'node:child_process';
import { promises as fs } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

/** Why the packaging tests cannot run here, or undefined when they can. */
export function skipReason(): string | undefined {
  if (process.platform !== 'linux') return 'packaging tests need Linux';
  if (process.getuid?.() !== 0) return 'packaging tests need root (they install build tools, boot containers and install packages)';
  return undefined;
}

export interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

export function run(cmd: string, args: string[], opts: { cwd?: string; env?: NodeJS.ProcessEnv; timeoutMs?: number } = {}): Promise<Run> {
  return new Promise((resolve) => {
    execFile(
      cmd,
      args,
      { cwd: opts.cwd, env: opts.env ?? process.env, timeout: opts.timeoutMs ?? 120_000, killSignal: 'SIGKILL', maxBuffer: 256 * 1024 * 1024 },
      (err, stdout, stderr) => {
        const e = err as (Error & { code?: unknown }) | null;
        resolve({ code: !e ? 0 : typeof e.code === 'number' ? e.code : -1, stdout: String(stdout), stderr: String(stderr) + (e && typeof e.code !== 'number' ? `\n${e.message}` : '') });
      },
    );
  });
}

export async function must(cmd: string, args: string[], opts: { cwd?: string; env?: NodeJS.ProcessEnv; timeoutMs?: number } = {}): Promise<string> {
  const r = await run(cmd, args, opts);
  if (r.code !== 0) throw new Error(`${cmd} ${args.join(' ')} failed (${r.code}):\n${r.stdout.slice(-4000)}\n${r.stderr.slice(-4000)}`);
  return r.stdout;
}

export interface BuiltPackages {
  version: string;
  deb: string;
  rpm: string;
  dir: string;
  /** lintian's and rpmlint's output from the build. */
  lintian: string;
  rpmlint: string;
}

const BUILD_TIMEOUT_MS = 20 * 60_000;

async function buildIn(tree: string, outDir: string): Promise<BuiltPackages> {
  await must('bash', [path.join(tree, 'packaging', 'build-packages.sh')], {
    cwd: tree,
    env: { ...process.env, VMKEEPER_OUT: outDir },
    timeoutMs: BUILD_TIMEOUT_MS,
  });
  const version = JSON.parse(await fs.readFile(path.join(tree, 'package.json'), 'utf8')).version as string;
  const dir = path.join(outDir, 'packages');
  const files = await fs.readdir(dir);
  const deb = files.find((f) => f.startsWith(`vmkeeper_${version}_`) && f.endsWith('.deb'));
  const rpm = files.find((f) => f.startsWith(`vmkeeper-${version}-`) && f.endsWith('.rpm'));
  if (!deb || !rpm) throw new Error(`no packages for ${version} in ${dir}: ${files.join(' ')}`);
  return {
    version,
    dir,
    deb: path.join(dir, deb),
    rpm: path.join(dir, rpm),
    lintian: await fs.readFile(path.join(dir, 'lintian.txt'), 'utf8'),
    rpmlint: await fs.readFile(path.join(dir, 'rpmlint.txt'), 'utf8'),
  };
}

let current: Promise<BuiltPackages> | undefined;
/** The packages of this tree, in <repo>/out/packages (what `make packages` builds). */
export function buildPackages(): Promise<BuiltPackages> {
  return (current ??= buildIn(REPO, path.join(REPO, 'out')));
}

/** The tree's files as a clean checkout has them (tracked and untracked-but-not-ignored). */
async function treeFiles(): Promise<string[]> {
  const out = await must('git', ['-C', REPO, 'ls-files', '-z', '--cached', '--others', '--exclude-standard']);
  const files: string[] = [];
  for (const f of out.split('\0').filter(Boolean)) {
    if (await fs.stat(path.join(REPO, f)).then((s) => s.isFile(), () => false)) files.push(f);
  }
  return files;
}

export function bumpPatch(version: string): string {
  const m = /^(\d+)\.(\d+)\.(\d+)/.exec(version);
  if (!m) throw new Error(`cannot bump ${version}`);
  return `${m[1]}.${m[2]}.${Number(m[3]) + 1}`;
}

let upgrade: Promise<BuiltPackages> | undefined;
/**
 * A newer build of the same tree: a copy under .cache/packaging/upgrade/src with package.json's
 * version bumped by one patch level and a changelog entry for it (with a fixed date, so that
 * unchanged inputs hit the build cache in .cache/packaging/upgrade/out).
 */
export function buildUpgradePackages(): Promise<BuiltPackages> {
  return (upgrade ??= (async () => {
    const base = path.join(REPO, '.cache', 'packaging', 'upgrade');
    const src = path.join(base, 'src');
    await fs.rm(src, { recursive: true, force: true });
    await fs.mkdir(src, { recursive: true });
    for (const f of await treeFiles()) {
      await fs.mkdir(path.dirname(path.join(src, f)), { recursive: true });
      await fs.copyFile(path.join(REPO, f), path.join(src, f));
      await fs.chmod(path.join(src, f), (await fs.stat(path.join(REPO, f))).mode & 0o777);
    }
    const pkgPath = path.join(src, 'package.json');
    const pkg = JSON.parse(await fs.readFile(pkgPath, 'utf8'));
    const next = bumpPatch(pkg.version);
    pkg.version = next;
    await fs.writeFile(pkgPath, `${JSON.stringify(pkg, null, 2)}\n`);
    const lockPath = path.join(src, 'package-lock.json');
    const lock = JSON.parse(await fs.readFile(lockPath, 'utf8'));
    lock.version = next;
    if (lock.packages?.['']) lock.packages[''].version = next;
    await fs.writeFile(lockPath, `${JSON.stringify(lock, null, 2)}\n`);
    await must('sh', [path.join(src, 'packaging', 'add-changelog-entry.sh'), next, 'Test build for the upgrade test (version bumped in a temporary copy).'], {
      env: { ...process.env, VMKEEPER_CHANGELOG_DATE: 'Wed, 02 Dec 2026 17:00:00 +0000' },
    });
    return buildIn(src, path.join(base, 'out'));
  })());
}
