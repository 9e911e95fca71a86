import { AgentError } from './errors.js';

// A DNS label: it becomes part of a libvirt domain name, a file name and a D-Bus path.
const NAME_PATTERN = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;

export function validateMachineName(name: unknown): string {
  if (typeof name !== 'string') throw new AgentError('InvalidName', 'machine name must be a string');
  if (!NAME_PATTERN.test(name)) {
    const shown = name.length > 70 ? `${name.slice(0, 64)}...` : name;
    throw new AgentError(
      'InvalidName',
      `invalid machine name ${JSON.stringify(shown)}: use 1-63 characters of a-z, 0-9 and inner "-"`,
    );
  }
  return name;
}

/**
 * Escapes one D-Bus object path element the way systemd's bus_label_escape (sd_bus_path_encode)
 * does: letters pass, digits pass except in first place, every other byte becomes _xx.
 */
export function escapePathLabel(label: string): string {
  if (label.length === 0) return '_';
  let out = '';
  Buffer.from(label, 'utf8').forEach((byte, i) => {
    const isAlpha = (byte >= 0x41 && byte <= 0x5a) || (byte >= 0x61 && byte <= 0x7a);
    const isDigit = byte >= 0x30 && byte <= 0x39;
    out += isAlpha || (isDigit && i > 0) ? String.fromCharCode(byte) : `_${byte.toString(16).padStart(2, '0')}`;
  });
  return out;
}

export function unescapePathLabel(label: string): string {
  if (label === '_') return '';
  const bytes: number[] = [];
  for (let i = 0; i < label.length; i++) {
    if (label[i] === '_') {
      bytes.push(parseInt(label.slice(i + 1, i + 3), 16));
      i += 2;
    } else bytes.push(label.charCodeAt(i));
  }
  return Buffer.from(bytes).toString('utf8');
}

export const MANAGER_PATH = '/org/vmkeeper1';
export const MACHINE_PATH_PREFIX = '/org/vmkeeper1/machine/';

export function machineObjectPath(name: string): string {
  return MACHINE_PATH_PREFIX + escapePathLabel(name);
}

/** Libvirt domain names carry a prefix so a cheap list call tells our domains from the host's others. */
export const DOMAIN_NAME_PREFIX = 'vmkeeper-';

export function domainNameFor(machineName: string): string {
  return DOMAIN_NAME_PREFIX + machineName;
}

export function machineNameFromDomain(domainName: string): string | undefined {
  if (!domainName.startsWith(DOMAIN_NAME_PREFIX)) return undefined;
  const name = domainName.slice(DOMAIN_NAME_PREFIX.length);
  return NAME_PATTERN.test(name) ? name : undefined;
}

/**
 * Where `name` is in `sorted`, ordered by `nameOf` as Array.prototype.sort orders strings (UTF-16
 * code units), or where it would go: the sorted views of machines keep their order with it.
 */
export function sortedIndexOf<T>(sorted: readonly T[], name: string, nameOf: (item: T) => string): number {
  let lo = 0;
  let hi = sorted.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (nameOf(sorted[mid]!) < name) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
