import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { busctlCall, busctlGetProperty, dbusSend, type BusctlValue } from './busctl.js';
import { startSystemBus, type PrivateBus } from './dbus-daemon.js';
import { startAgent, type AgentProcess, type AgentProcessOptions } from './agent-process.js';
import { ensureGuestImages, GUEST_CACHE_DIR, LIBVIRT_CACHE_DIR, READY_LINE, waitForSerialLine, type GuestImages } from './guest-images.js';
import { startLibvirtd, virsh, type PrivateLibvirtd } from './libvirtd.js';
import { waitFor } from './wait.js';

// The real-qemu rig: a private libvirtd, a system-like bus with the project's policy and the
// agent as a process, plus the calls those suites make over the bus. Needs root (libvirtd, qemu).

export const MANAGER = ['/org/vmkeeper1', 'org.vmkeeper1.Manager'] as const;

/** acpi: the guest powers off on the ACPI button; ignore: it never does. */
export type GuestMode = 'acpi' | 'ignore';
/** One ListEvents entry: timestamp (us), machine, type, reason, message. */
export type BusEvent = [bigint | number, string, string, string, string];

export class QemuRig {
  agent!: AgentProcess;
  readonly opts: AgentProcessOptions;

  private constructor(
    readonly dir: string,
    readonly images: GuestImages,
    readonly libvirtd: PrivateLibvirtd,
    readonly bus: PrivateBus,
    extraArgs: string[],
    configFile: string | undefined,
  ) {
    this.opts = { busAddress: bus.address, stateDir: path.join(dir, 'state'), imageDir: GUEST_CACHE_DIR, libvirtUri: libvirtd.uri, extraArgs, configFile };
  }

  /**
   * Builds the guest images if needed, starts libvirtd, the bus and the agent (extraArgs go to the
   * agent). configYaml replaces the shipped config file (keys it leaves out take their defaults).
   */
  static async start(extraArgs: string[] = [], configYaml?: string): Promise<QemuRig> {
    const images = await ensureGuestImages();
    const dir = await mkdtemp(path.join(os.tmpdir(), 'vmk-qemu-'));
    const libvirtd = await startLibvirtd({ runDir: path.join(dir, 'lv'), cacheDir: LIBVIRT_CACHE_DIR });
    const bus = await startSystemBus();
    let configFile: string | undefined;
    if (configYaml !== undefined) {
      configFile = path.join(dir, 'config.yaml');
      await writeFile(configFile, configYaml);
    }
    const rig = new QemuRig(dir, images, libvirtd, bus, extraArgs, configFile);
    rig.agent = await startAgent(rig.opts);
    return rig;
  }

  async stop(): Promise<void> {
    await this.agent?.stop();
    await this.libvirtd.stop();
    await this.bus.stop();
    await rm(this.dir, { recursive: true, force: true });
  }

  /** A new agent process on the same state (after this.agent was stopped or killed). */
  async startAgent(): Promise<AgentProcess> {
    this.agent = await startAgent(this.opts);
    return this.agent;
  }

  spec(mode: GuestMode, extra: Record<string, unknown> = {}): string {
    const { kernel, initrdAcpi, initrdIgnore } = this.images;
    return JSON.stringify({
      cpus: 1,
      memoryMiB: 96,
      domainType: 'qemu',
      boot: { kernel, initrd: mode === 'acpi' ? initrdAcpi : initrdIgnore, cmdline: 'console=ttyS0' },
      ...extra,
    });
  }

  call(method: string, sig = '', args: (string | number)[] = []): Promise<BusctlValue> {
    return busctlCall(this.bus.address, ...MANAGER, method, sig, args);
  }

  machinePath(name: string): string {
    return `/org/vmkeeper1/machine/${name.replace(/-/g, '_2d')}`;
  }

  async state(name: string): Promise<unknown> {
    return (await busctlGetProperty(this.bus.address, this.machinePath(name), 'org.vmkeeper1.Machine', 'State')).data;
  }

  /** A timestamp property in milliseconds. */
  async usec(name: string, prop: string): Promise<number> {
    return Number((await busctlGetProperty(this.bus.address, this.machinePath(name), 'org.vmkeeper1.Machine', prop)).data) / 1000;
  }

  async events(name: string): Promise<BusEvent[]> {
    return ((await this.call('ListEvents')).data as [BusEvent[]])[0].filter((e) => e[1] === name);
  }

  async reasons(name: string): Promise<string[]> {
    return (await this.events(name)).map((e) => e[3]);
  }

  async exists(name: string): Promise<boolean> {
    return !(await dbusSend(this.bus.address, MANAGER[0], `${MANAGER[1]}.GetMachine`, [`string:${name}`])).errorName;
  }

  serialLog(name: string): string {
    return path.join(this.opts.stateDir, 'guests', name, 'serial.log');
  }

  /** virsh against the rig's own libvirtd, as an operator acting behind the agent's back would. */
  virsh(args: string[]): ReturnType<typeof virsh> {
    return virsh(this.libvirtd.uri, args);
  }

  async domainState(name: string): Promise<string> {
    return (await this.virsh(['domstate', `vmkeeper-${name}`])).stdout.trim();
  }

  /** Creates the machine and waits until its guest is up (its ready line on the serial log). */
  async createAndBoot(name: string, mode: GuestMode, extra?: Record<string, unknown>): Promise<void> {
    await this.call('CreateMachine', 'ss', [name, this.spec(mode, extra)]);
    await waitFor(async () => (await this.state(name)) === 'running', { timeoutMs: 30_000, what: `${name} running` });
    await waitForSerialLine(this.serialLog(name), READY_LINE(mode), 60_000);
  }
}
