import { execFile } from 'node:child_process';

// busctl/dbus-send as a separate process, optionally as another user. Always async: the service
// under test runs in this process and must keep answering while the client waits.

export const BUS_NAME = 'org.vmkeeper1';

export interface RunAs {
  user: string;
  group: string;
  /** Take the user's supplementary groups from /etc/group (needed for group policies). */
  initGroups?: boolean;
}

export const NOBODY: RunAs = { user: 'nobody', group: 'nogroup' };

export interface ClientOptions {
  as?: RunAs;
  timeoutMs?: number;
}

export interface ExecResult {
  code: number;
  stdout: string;
  stderr: string;
}

export function run(command: string, args: string[], options: ClientOptions = {}): Promise<ExecResult> {
  const { as, timeoutMs = 15_000 } = options;
  const [file, argv] = as
    ? [
        'setpriv',
        [
          `--reuid=${as.user}`,
          `--regid=${as.group}`,
          ...(as.initGroups ? ['--init-groups'] : ['--clear-groups']),
          '--',
          command,
          ...args,
        ],
      ]
    : [command, args];
  return new Promise((resolve) => {
    execFile(file, argv, { timeout: timeoutMs, encoding: 'utf8' }, (err, stdout, stderr) => {
      const code = err ? (typeof err.code === 'number' ? err.code : 1) : 0;
      resolve({ code, stdout, stderr });
    });
  });
}

/** Raw `busctl --address=A ARGS`. */
export function busctl(address: string, args: string[], options?: ClientOptions): Promise<ExecResult> {
  return run('busctl', [`--address=${address}`, ...args], options);
}

export class BusctlError extends Error {
  constructor(readonly result: ExecResult) {
    super(`busctl failed (${result.code}): ${result.stderr.trim()}`);
  }
}

export interface BusctlValue {
  type: string;
  data: unknown;
}

async function json(address: string, args: string[], options?: ClientOptions): Promise<BusctlValue> {
  const result = await busctl(address, ['--json=short', ...args], options);
  if (result.code !== 0) throw new BusctlError(result);
  // A call with an empty reply prints nothing.
  return result.stdout.trim() ? (JSON.parse(result.stdout) as BusctlValue) : { type: '', data: [] };
}

/** `busctl call org.vmkeeper1 PATH IFACE METHOD [SIG ARGS...]`; `data` is the reply body. */
export function busctlCall(
  address: string,
  path: string,
  iface: string,
  method: string,
  signature = '',
  args: (string | number)[] = [],
  options?: ClientOptions,
): Promise<BusctlValue> {
  const sig = signature ? [signature, ...args.map(String)] : [];
  return json(address, ['call', BUS_NAME, path, iface, method, ...sig], options);
}

/** `busctl get-property org.vmkeeper1 PATH IFACE PROPERTY`; `data` is the value. */
export function busctlGetProperty(
  address: string,
  path: string,
  iface: string,
  property: string,
  options?: ClientOptions,
): Promise<BusctlValue> {
  return json(address, ['get-property', BUS_NAME, path, iface, property], options);
}

export interface CallOutcome {
  ok: boolean;
  /** D-Bus error name when the call failed (busctl prints only the message, dbus-send both). */
  errorName?: string;
  message: string;
  stdout: string;
}

/**
 * A call through `dbus-send --print-reply`, which shows the error name. Args use its syntax:
 * `string:web-1`, `uint32:30`, `dict:string:string:k,v`.
 */
export async function dbusSend(
  address: string,
  path: string,
  ifaceMember: string,
  args: string[] = [],
  options?: ClientOptions,
): Promise<CallOutcome> {
  const result = await run(
    'dbus-send',
    [`--bus=${address}`, '--print-reply', `--dest=${BUS_NAME}`, path, ifaceMember, ...args],
    options,
  );
  if (result.code === 0) return { ok: true, message: '', stdout: result.stdout };
  // "Error org.vmkeeper1.Error.NoSuchMachine: no machine named ..."
  const match = /^Error ([A-Za-z0-9_.]+): ?([\s\S]*)$/m.exec(result.stderr);
  return { ok: false, errorName: match?.[1], message: (match?.[2] ?? result.stderr).trim(), stdout: result.stdout };
}

/** Creates `group` and a system user `user` in it when absent (tests run as root); returns its RunAs. */
export async function ensureUserInGroup(user: string, group: string): Promise<RunAs> {
  const must = async (cmd: string, args: string[]) => {
    const r = await run(cmd, args);
    if (r.code !== 0) throw new Error(`${cmd} ${args.join(' ')} failed: ${r.stderr.trim()}`);
  };
  if ((await run('getent', ['group', group])).code !== 0) await must('groupadd', ['--system', group]);
  if ((await run('getent', ['passwd', user])).code !== 0) {
    await must('useradd', ['--system', '--no-create-home', '--shell', '/usr/sbin/nologin', '--gid', 'nogroup', '--groups', group, user]);
  } else {
    await must('usermod', ['--append', '--groups', group, user]);
  }
  return { user, group: 'nogroup', initGroups: true };
}
