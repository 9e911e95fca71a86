import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, copyFile, mkdir, rename, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { busctl } from './busctl.js';
import { stopChild } from './dbus-daemon.js';
import { waitFor } from './wait.js';

// The real polkitd on a private bus, in a mount namespace of its own: temp folders are bound over
// its actions and rules folders, so it reads only the files a test gives it and the host's stay as they are.

export const POLKITD = '/usr/lib/polkit-1/polkitd';
/** The bus policy polkitd's package installs, letting it own its name. */
export const POLKIT_BUS_POLICY = '/usr/share/dbus-1/system.d/org.freedesktop.PolicyKit1.conf';
const POLKIT_NAME = 'org.freedesktop.PolicyKit1';

/** Why polkitd cannot run here, or undefined when it can. */
export function polkitdUnavailable(): string | undefined {
  if (process.getuid?.() !== 0) return 'polkitd and its mount namespace need root';
  if (!existsSync(POLKITD)) return `${POLKITD} is not installed (scripts/install-deps.sh test installs polkitd)`;
  if (!existsSync(POLKIT_BUS_POLICY)) return `${POLKIT_BUS_POLICY} is missing`;
  return undefined;
}

export interface PolkitdOptions {
  busAddress: string;
  /** A folder of the test's own; polkitd's folders are made inside it. */
  dir: string;
  /** .policy files, seen by polkitd in /usr/share/polkit-1/actions. */
  actionFiles: string[];
  /** Packaged .rules files, seen in /usr/share/polkit-1/rules.d. */
  ruleFiles: string[];
}

export interface PrivatePolkitd {
  /** What polkitd sees as /etc/polkit-1/rules.d: an administrator's rules, reread on change. */
  adminRulesDir: string;
  /** Writes an administrator's rule file (polkitd notices it and reloads). */
  addAdminRule(fileName: string, javascript: string): Promise<void>;
  stop(): Promise<void>;
}

export async function startPolkitd(o: PolkitdOptions): Promise<PrivatePolkitd> {
  const actions = path.join(o.dir, 'actions');
  const vendorRules = path.join(o.dir, 'vendor-rules.d');
  const adminRules = path.join(o.dir, 'admin-rules.d');
  for (const folder of [actions, vendorRules, adminRules]) await mkdir(folder, { recursive: true, mode: 0o755 });
  // polkitd reads its files as user polkitd once it has dropped root.
  await chmod(o.dir, 0o755);
  for (const file of o.actionFiles) await copyReadable(file, actions);
  for (const file of o.ruleFiles) await copyReadable(file, vendorRules);
  const script = [
    'set -e',
    'mount --bind "$1" /usr/share/polkit-1/actions',
    'mount --bind "$2" /usr/share/polkit-1/rules.d',
    'mount --bind "$3" /etc/polkit-1/rules.d',
    `exec ${POLKITD} --no-debug`,
  ].join('\n');
  const child = spawn('unshare', ['--mount', '--propagation', 'private', 'sh', '-c', script, 'polkitd-ns', actions, vendorRules, adminRules], {
    env: { ...process.env, DBUS_SYSTEM_BUS_ADDRESS: o.busAddress },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const exited = () => child.exitCode !== null || child.signalCode !== null;
  try {
    await waitFor(
      async () => {
        if (exited()) throw new Error(`polkitd exited (${child.exitCode ?? child.signalCode}): ${stderr.trim()}`);
        return (await busctl(o.busAddress, ['status', POLKIT_NAME])).code === 0;
      },
      { timeoutMs: 30_000, intervalMs: 100, what: 'polkitd to own org.freedesktop.PolicyKit1', rethrow: () => exited() },
    );
  } catch (err) {
    await stopChild(child);
    throw err;
  }
  return {
    adminRulesDir: adminRules,
    async addAdminRule(fileName, javascript) {
      const tmp = path.join(adminRules, `.${fileName}.tmp`);
      await writeFile(tmp, javascript, { mode: 0o644 });
      // polkitd picks up only *.rules; a rename makes it see the whole file at once.
      await rename(tmp, path.join(adminRules, fileName));
    },
    async stop() {
      await stopChild(child);
      await rm(o.dir, { recursive: true, force: true });
    },
  };
}

async function copyReadable(file: string, folder: string): Promise<void> {
  const target = path.join(folder, path.basename(file));
  await copyFile(file, target);
  await chmod(target, 0o644);
}

