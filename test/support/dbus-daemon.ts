import { spawn, type ChildProcess } from 'node:child_process';
import { chmod, copyFile, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

// A private dbus-daemon per test suite, started without --fork so its lifetime is ours.

export const PROJECT_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const POLICY_FILE = path.join(PROJECT_ROOT, 'config/org.vmkeeper1.conf');

export interface PrivateBus {
  /** The D-Bus address to hand to busctl --address= or the agent's config. */
  address: string;
  pid: number;
  /** Temp folder holding the socket and config; removed by stop(). */
  dir: string;
  stop(): Promise<void>;
}

/** The project's private session-like bus config (also used by scripts/run-dev.sh). */
const SESSION_CONFIG_TEMPLATE = path.join(PROJECT_ROOT, 'scripts/session-bus.conf.in');

/** A permissive bus like a session bus: anyone may own and call anything. */
export async function startSessionBus(): Promise<PrivateBus> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'vmkeeper-session-bus-'));
  const config = path.join(dir, 'session.conf');
  await writeFile(config, (await readFile(SESSION_CONFIG_TEMPLATE, 'utf8')).replaceAll('@SOCKET@', path.join(dir, 'bus')));
  return launch(dir, config);
}

export interface SystemBusOptions {
  /** Policy files placed in the bus's includedir; default: the project's config/org.vmkeeper1.conf. */
  policyFiles?: string[];
  /** Files of a second includedir read after the first, as /etc/dbus-1/system.d is after /usr/share. */
  localPolicyFiles?: string[];
}

/** A bus with the host's system.conf rules (deny by default) plus our policy, on a temp socket. */
export async function startSystemBus(options: SystemBusOptions = {}): Promise<PrivateBus> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'vmkeeper-system-bus-'));
  // mkdtemp makes 0700: other users (nobody) must reach the socket inside.
  await chmod(dir, 0o755);
  const includeDir = path.join(dir, 'system.d');
  await mkdir(includeDir, { mode: 0o755 });
  for (const file of options.policyFiles ?? [POLICY_FILE]) await copyFile(file, path.join(includeDir, path.basename(file)));
  const localDir = path.join(dir, 'local-system.d');
  await mkdir(localDir, { mode: 0o755 });
  for (const file of options.localPolicyFiles ?? []) await copyFile(file, path.join(localDir, path.basename(file)));
  const base = await readFile('/usr/share/dbus-1/system.conf', 'utf8');
  const config = base
    .replace(/<listen>[^<]*<\/listen>/g, `<listen>unix:path=${path.join(dir, 'system_bus_socket')}</listen>`)
    .replace(/<pidfile>[^<]*<\/pidfile>/g, `<pidfile>${path.join(dir, 'pid')}</pidfile>`)
    .replace(/<includedir>[^<]*<\/includedir>/g, '')
    .replace(/<include\b[^>]*>[^<]*<\/include>/g, '')
    .replace(/<user>[^<]*<\/user>/g, '') // stay root: the temp dir is ours
    .replace(/<fork\/>/g, '')
    .replace(/<syslog\/>/g, '')
    .replace(/<standard_system_servicedirs\/>/g, '')
    .replace(/<servicedir>[^<]*<\/servicedir>/g, '')
    .replace(/<servicehelper>[^<]*<\/servicehelper>/g, '')
    .replace('</busconfig>', `  <includedir>${includeDir}</includedir>\n  <includedir>${localDir}</includedir>\n</busconfig>`);
  const file = path.join(dir, 'system.conf');
  await writeFile(file, config);
  return launch(dir, file);
}

async function launch(dir: string, config: string): Promise<PrivateBus> {
  const child = spawn('dbus-daemon', [`--config-file=${config}`, '--nofork', '--nopidfile', '--print-address=1'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let address: string;
  try {
    address = await readAddress(child);
  } catch (err) {
    child.kill('SIGKILL');
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
  return {
    address,
    pid: child.pid!,
    dir,
    async stop() {
      await stopChild(child);
      await rm(dir, { recursive: true, force: true });
    },
  };
}

function readAddress(child: ChildProcess, timeoutMs = 10_000): Promise<string> {
  return new Promise((resolve, reject) => {
    let out = '';
    let err = '';
    const timer = setTimeout(() => fail(new Error(`dbus-daemon printed no address within ${timeoutMs} ms: ${err}`)), timeoutMs);
    const fail = (e: Error) => {
      clearTimeout(timer);
      reject(e);
    };
    child.stderr!.on('data', (chunk: Buffer) => (err += chunk.toString()));
    child.stdout!.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      const line = out.split('\n');
      if (line.length > 1) {
        clearTimeout(timer);
        resolve(line[0]!.trim());
      }
    });
    child.once('error', fail);
    child.once('exit', (code) => fail(new Error(`dbus-daemon exited with ${code}: ${err.trim()}`)));
  });
}

/** SIGTERM, then SIGKILL after 3 s; resolves once the child has exited. */
export async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 3000);
  await exited;
  clearTimeout(timer);
}
