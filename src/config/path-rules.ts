import path from 'node:path';

// Which directories may be the state dir or an image dir. Every file under an image dir can be
// handed to root's qemu as a disk, kernel or initrd by any member of the vmkeeper group, and the
// agent writes, chmods and deletes under the state dir: neither may be, or hold, the host's own
// files. Paths arrive normalised (schema.ts absolutePath).

// The host's own trees: never a state or image dir themselves (a dir containing one, "/", neither).
const SYSTEM_DIRS = ['/bin', '/boot', '/dev', '/etc', '/home', '/lib', '/lib32', '/lib64', '/proc', '/root', '/run', '/sbin', '/srv', '/sys', '/tmp', '/usr', '/var', '/var/lib', '/var/log', '/var/tmp'];
// Kernel and device file systems: nothing inside them is a disk image or a place for records.
const VIRTUAL_TREES = ['/dev', '/proc', '/sys'];
// What the agent itself writes under the state dir (records, guest disks, quarantined files): never an image source,
// or one guest's disk becomes another's backing file.
const AGENT_SUBDIRS = ['machines', 'guests', 'quarantine'];

const isWithin = (dir: string, base: string) => dir === base || dir.startsWith(base === '/' ? '/' : `${base}/`);

/** Why dir must not hold the host's own files or kernel trees; undefined when it is fine. */
function systemDirProblem(dir: string): string | undefined {
  const system = SYSTEM_DIRS.find((s) => isWithin(s, dir));
  if (dir === '/' || system !== undefined) return `must not be a system directory or contain one (${dir === '/' ? '/' : system})`;
  const tree = VIRTUAL_TREES.find((t) => isWithin(dir, t));
  if (tree !== undefined) return `must not lie inside ${tree}`;
  return undefined;
}

export function stateDirProblem(stateDir: string): string | undefined {
  return systemDirProblem(stateDir);
}

/** An image dir may sit beside the agent's folders in the state dir (the packaged default), never over them. */
export function imageDirProblem(imageDir: string, stateDir: string): string | undefined {
  const system = systemDirProblem(imageDir);
  if (system !== undefined) return system;
  if (isWithin(stateDir, imageDir)) return `must not be or contain the state directory (${stateDir})`;
  const own = AGENT_SUBDIRS.map((sub) => path.join(stateDir, sub)).find((sub) => isWithin(imageDir, sub) || isWithin(sub, imageDir));
  if (own !== undefined) return `must not overlap ${own}, where the agent writes`;
  return undefined;
}
