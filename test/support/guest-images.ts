/**
 * The tiny test guest (Debian kernel + busybox initramfs) built by
 * test/fixtures/guest/build-guest.sh into <repo>/.cache/guest (gitignored).
 *
 * The cache path is stable and absolute on purpose: the agent only accepts kernel/initrd paths
 * inside configured image directories, so tests can configure GUEST_CACHE_DIR as one.
 */
import { execFile } from 'node:child_process';
import { promises as fs } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { waitFor } from './wait.js';

export const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
export const GUEST_CACHE_DIR = path.join(REPO_ROOT, '.cache', 'guest');
/** Persistent /var/cache/libvirt for private test daemons (qemu capability cache). */
export const LIBVIRT_CACHE_DIR = path.join(REPO_ROOT, '.cache', 'libvirt');
export const BUILD_GUEST_SCRIPT = path.join(REPO_ROOT, 'test', 'fixtures', 'guest', 'build-guest.sh');

/** Serial line printed by the guest once it is ready (acpid running in "acpi" mode). */
export const READY_LINE = (mode: 'acpi' | 'ignore') => `VMKEEPER-GUEST READY mode=${mode}`;

export interface GuestImages {
  kernel: string;
  initrdAcpi: string;
  initrdIgnore: string;
}

/** Build (or reuse from cache) the guest images. Cold: ~10 s plus a ~70 MB download; cached: ~10 ms. */
export async function ensureGuestImages(timeoutMs = 600_000): Promise<GuestImages> {
  await new Promise<void>((resolve, reject) => {
    execFile(
      BUILD_GUEST_SCRIPT,
      [GUEST_CACHE_DIR],
      { timeout: timeoutMs, killSignal: 'SIGKILL', maxBuffer: 16 * 1024 * 1024 },
      (err, _stdout, stderr) => {
        if (err) reject(new Error(`build-guest.sh failed: ${err.message}\n${String(stderr).slice(-4000)}`));
        else resolve();
      },
    );
  });
  const images: GuestImages = {
    kernel: path.join(GUEST_CACHE_DIR, 'vmlinuz'),
    initrdAcpi: path.join(GUEST_CACHE_DIR, 'initrd-acpi.img'),
    initrdIgnore: path.join(GUEST_CACHE_DIR, 'initrd-ignore.img'),
  };
  for (const f of Object.values(images)) await fs.access(f);
  return images;
}

/**
 * Poll `logFile` (e.g. a guest's `<serial type='file'>` log) until it contains `text`.
 * Resolves with the elapsed milliseconds; rejects with the log's tail after `timeoutMs`.
 */
export async function waitForSerialLine(logFile: string, text: string, timeoutMs: number): Promise<number> {
  const start = Date.now();
  let content = '';
  await waitFor(async () => (content = await fs.readFile(logFile, 'utf8').catch(() => '')).includes(text), {
    timeoutMs,
    intervalMs: 100,
    what: `"${text}" in ${logFile}`,
  }).catch((err: Error) => {
    throw new Error(`${err.message}; tail:\n${content.split('\n').slice(-15).join('\n')}`);
  });
  return Date.now() - start;
}

/** One counter line: the value and the boot it was printed in (the kernel's boot id, 8 hex digits). */
export interface Tick {
  n: number;
  boot: string;
}

/** What a guest's serial log says about its life: the counter it prints each second, with boot ids. */
export interface SerialProgress {
  /** READY lines: one per boot of the guest's init (a resumed guest prints none). */
  readyLines: number;
  /** The TICK lines in the order printed. */
  ticks: Tick[];
}

export function serialProgress(text: string): SerialProgress {
  const ticks: Tick[] = [];
  let readyLines = 0;
  for (const line of text.split('\n')) {
    const tick = /VMKEEPER-GUEST TICK (\d+) boot=([0-9a-f]+)\s*$/.exec(line);
    if (tick) ticks.push({ n: Number(tick[1]), boot: tick[2]! });
    else if (/VMKEEPER-GUEST READY mode=/.test(line)) readyLines += 1;
  }
  return { readyLines, ticks };
}

export async function readSerialProgress(logFile: string): Promise<SerialProgress> {
  return serialProgress(await fs.readFile(logFile, 'utf8').catch(() => ''));
}

/** The last counter line in the guest's serial log. */
export async function lastTick(logFile: string): Promise<Tick> {
  const tick = (await readSerialProgress(logFile)).ticks.at(-1);
  if (!tick) throw new Error(`no TICK line in ${logFile}`);
  return tick;
}

/** Waits until the guest's counter reaches at least `atLeast`; resolves with the last value seen. */
export async function waitForTick(logFile: string, atLeast: number, timeoutMs: number): Promise<number> {
  return waitFor(async () => {
    const last = (await readSerialProgress(logFile)).ticks.at(-1)?.n ?? 0;
    return last >= atLeast ? last : 0;
  }, { timeoutMs, intervalMs: 200, what: `TICK ${atLeast} in ${logFile}` });
}

/**
 * The ticks printed after `before` (the last one read before a save or a poweroff). qemu opens the
 * log anew (truncated) each time it starts, a restore included; should it append, the older lines
 * up to `before` are skipped.
 */
export function ticksAfter(before: Tick, now: SerialProgress): Tick[] {
  const at = now.ticks.findIndex((t) => t.boot === before.boot && t.n === before.n);
  return now.ticks.slice(at + 1);
}

/** Why the guest did not resume after `before` (same boot, counter on from it without a gap); undefined when it did. */
export function whyNotResumed(before: Tick, now: SerialProgress): string | undefined {
  const after = ticksAfter(before, now);
  if (after.length === 0) return `no TICK after ${before.n}`;
  const other = after.find((t) => t.boot !== before.boot);
  if (other) return `booted again (TICK ${other.n} boot=${other.boot}, was boot=${before.boot})`;
  if (after[0]!.n !== before.n + 1) return `counter went on at ${after[0]!.n}, not ${before.n + 1}`;
  const gap = after.findIndex((t, i) => i > 0 && t.n !== after[i - 1]!.n + 1);
  return gap > 0 ? `counter jumped from ${after[gap - 1]!.n} to ${after[gap]!.n}` : undefined;
}

/** Whether the guest booted anew after `before`: its latest ticks are of another boot, counting from 1. */
export function bootedAgain(before: Tick, now: SerialProgress): boolean {
  const latest = now.ticks.at(-1);
  if (!latest || latest.boot === before.boot) return false;
  return now.ticks.find((t) => t.boot === latest.boot)!.n === 1;
}
