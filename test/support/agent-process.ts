import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { busctlCall } from './busctl.js';
import { PROJECT_ROOT } from './dbus-daemon.js';
import { waitFor } from './wait.js';

// vmkeeperd as a real separate process (run from source through tsx), so tests can SIGTERM it,
// kill -9 it and start it again on the same state directory.

export interface AgentProcessOptions {
  busAddress: string;
  stateDir: string;
  imageDir: string;
  libvirtUri: string;
  configFile?: string;
  extraArgs?: string[];
  env?: NodeJS.ProcessEnv;
  /** Run the built agent (dist/main.js, as the packages do) instead of the sources through tsx. */
  built?: boolean;
  /** Options for node itself, before the script (e.g. --cpu-prof, not allowed in NODE_OPTIONS). */
  nodeArgs?: string[];
}

export interface AgentProcess {
  child: ChildProcess;
  /** Everything the agent wrote to stdout and stderr so far. */
  output(): string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Resolves once the agent answers on the bus. */
  ready(timeoutMs?: number): Promise<void>;
  stop(signal?: NodeJS.Signals): Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

export const MAIN_TS = path.join(PROJECT_ROOT, 'src/main.ts');
export const MAIN_JS = path.join(PROJECT_ROOT, 'dist/main.js');

export function agentArgs(o: AgentProcessOptions): string[] {
  return [
    '--config', o.configFile ?? path.join(PROJECT_ROOT, 'config/config.yaml'),
    '--bus', o.busAddress,
    '--libvirt-uri', o.libvirtUri,
    '--state-dir', o.stateDir,
    '--image-dir', o.imageDir,
    '--log-format', 'text',
    '--log-level', 'debug',
    ...(o.extraArgs ?? []),
  ];
}

export function spawnAgent(o: AgentProcessOptions): AgentProcess {
  const entry = o.built ? [MAIN_JS] : ['--import', 'tsx', MAIN_TS];
  const child = spawn(process.execPath, [...(o.nodeArgs ?? []), ...entry, ...agentArgs(o)], {
    cwd: PROJECT_ROOT,
    env: { ...process.env, NOTIFY_SOCKET: '', ...o.env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout!.on('data', (c: Buffer) => (output += c.toString()));
  child.stderr!.on('data', (c: Buffer) => (output += c.toString()));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  let hasExited = false;
  void exited.then(() => (hasExited = true));
  return {
    child,
    output: () => output,
    exited,
    async ready(timeoutMs = 30_000) {
      await waitFor(
        async () => {
          if (hasExited) throw new Error(`vmkeeperd exited during start-up:\n${output}`);
          const reply = await busctlCall(o.busAddress, '/org/vmkeeper1', 'org.vmkeeper1.Manager', 'ListMachines').catch(() => undefined);
          return reply !== undefined;
        },
        // An agent that died will not answer later: fail now, with its output.
        { timeoutMs, intervalMs: 100, what: 'vmkeeperd to answer on the bus', rethrow: () => hasExited },
      ).catch((err) => {
        if (hasExited) throw new Error(`vmkeeperd exited during start-up:\n${output}`);
        throw new Error(`${(err as Error).message}\n--- agent output ---\n${output}`);
      });
    },
    async stop(signal = 'SIGTERM') {
      if (!hasExited) child.kill(signal);
      const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
      const result = await exited;
      clearTimeout(timer);
      return result;
    },
  };
}

/** Starts the agent and waits until it answers. */
export async function startAgent(o: AgentProcessOptions): Promise<AgentProcess> {
  const agent = spawnAgent(o);
  await agent.ready();
  return agent;
}
