import path from 'node:path';
import { MAX_ANNOTATIONS, MAX_ANNOTATIONS_BYTES, annotationKeyProblem, emptyAnnotations, type Annotations } from '../src/machine/annotations.js';
import { invalidSpec } from '../src/machine/errors.js';
import { parseSpecJson, type BootSpec, type DiskSpec, type MachineSpec, type NicSpec, type PowerState, type SpecLimits } from '../src/machine/spec.js';
import { textProblem } from '../src/machine/text-rules.js';

// The spec validator as it was before valibot (hand-written, one function per section), kept
// here only so bench/schema-startup.bench.ts can compare the two on the same input.

/** A shortened, JSON-quoted key for error messages (the key itself may be hostile). */
function shown(key: string): string {
  return JSON.stringify(key.length > 64 ? `${key.slice(0, 64)}...` : key);
}

/** Validates an annotation map from a caller; throws InvalidSpec naming the key at fault. */
function parseAnnotations(v: unknown, field = 'annotations'): Annotations {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw invalidSpec(field, 'must be an object of strings');
  const entries = Object.entries(v);
  if (entries.length > MAX_ANNOTATIONS) throw invalidSpec(field, `must have at most ${MAX_ANNOTATIONS} entries`);
  const out = emptyAnnotations();
  let bytes = 0;
  for (const [key, value] of entries) {
    const keyProblem = annotationKeyProblem(key) ?? textProblem(key);
    if (keyProblem) throw invalidSpec(`${field}[${shown(key)}]`, `key ${keyProblem}`);
    if (typeof value !== 'string') throw invalidSpec(`${field}.${key}`, 'must be a string');
    const valueProblem = textProblem(value, true);
    if (valueProblem) throw invalidSpec(`${field}.${key}`, valueProblem);
    bytes += Buffer.byteLength(key, 'utf8') + Buffer.byteLength(value, 'utf8');
    if (bytes > MAX_ANNOTATIONS_BYTES) throw invalidSpec(field, `keys and values must total at most ${MAX_ANNOTATIONS_BYTES} bytes`);
    out[key] = value;
  }
  return out;
}

const MAX_DISKS = 16;
const MAX_NICS = 16;
const MAX_GRACE_SEC = 24 * 3600;
const DEVICE_NAME = /^[a-z][a-z0-9_-]{0,31}$/;
const NET_NAME = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$/;

type Json = Record<string, unknown>;

function isObject(v: unknown): v is Json {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function onlyKeys(obj: Json, allowed: readonly string[], where: string): void {
  for (const key of Object.keys(obj)) {
    if (!allowed.includes(key)) throw invalidSpec(where ? `${where}.${key}` : key, 'unknown key');
  }
}

function integer(v: unknown, field: string, min: number, max: number): number {
  if (typeof v !== 'number' || !Number.isInteger(v)) throw invalidSpec(field, 'must be an integer');
  if (v < min || v > max) throw invalidSpec(field, `must be between ${min} and ${max}`);
  return v;
}

function text(v: unknown, field: string, maxLen: number): string {
  if (typeof v !== 'string') throw invalidSpec(field, 'must be a string');
  if (v.length > maxLen) throw invalidSpec(field, `must be at most ${maxLen} characters`);
  // Control characters have no place in paths, names or a kernel command line, NUL cannot survive
  // the trip into libvirt's C strings, and the spec is sent back on the bus as it was given.
  const problem = textProblem(v);
  if (problem) throw invalidSpec(field, problem);
  return v;
}

/** An absolute, normalised path inside one of the image directories, so a guest never gets /etc/shadow. */
function imagePath(v: unknown, field: string, limits: SpecLimits): string {
  const p = text(v, field, 4096);
  if (!path.isAbsolute(p)) throw invalidSpec(field, 'must be an absolute path');
  if (path.normalize(p) !== p || p.split('/').includes('..')) throw invalidSpec(field, 'must be a normalised path without ".."');
  const inside = limits.imageDirectories.some((dir) => {
    const base = dir.endsWith('/') ? dir : `${dir}/`;
    return p.startsWith(base) && p.length > base.length;
  });
  if (!inside) throw invalidSpec(field, `must lie inside an image directory (${limits.imageDirectories.join(', ')})`);
  return p;
}

function parseBoot(v: unknown, limits: SpecLimits): BootSpec {
  if (!isObject(v)) throw invalidSpec('boot', 'must be an object');
  onlyKeys(v, ['kernel', 'initrd', 'cmdline'], 'boot');
  if (v.kernel === undefined) throw invalidSpec('boot.kernel', 'is required');
  const boot: BootSpec = { kernel: imagePath(v.kernel, 'boot.kernel', limits) };
  if (v.initrd !== undefined) boot.initrd = imagePath(v.initrd, 'boot.initrd', limits);
  if (v.cmdline !== undefined) boot.cmdline = text(v.cmdline, 'boot.cmdline', 2048);
  return boot;
}

function parseDisks(v: unknown, limits: SpecLimits): DiskSpec[] {
  if (!Array.isArray(v)) throw invalidSpec('disks', 'must be an array');
  if (v.length > MAX_DISKS) throw invalidSpec('disks', `must have at most ${MAX_DISKS} entries`);
  const seen = new Set<string>();
  return v.map((d, i) => {
    const where = `disks[${i}]`;
    if (!isObject(d)) throw invalidSpec(where, 'must be an object');
    onlyKeys(d, ['name', 'image', 'sizeGiB'], where);
    const name = text(d.name, `${where}.name`, 32);
    if (!DEVICE_NAME.test(name)) throw invalidSpec(`${where}.name`, 'must match [a-z][a-z0-9_-]{0,31}');
    if (seen.has(name)) throw invalidSpec(`${where}.name`, `duplicate disk name "${name}"`);
    seen.add(name);
    const disk: DiskSpec = { name };
    if (d.image !== undefined) disk.image = imagePath(d.image, `${where}.image`, limits);
    if (d.sizeGiB !== undefined) disk.sizeGiB = integer(d.sizeGiB, `${where}.sizeGiB`, 1, limits.maxDiskGiB);
    if (disk.image === undefined && disk.sizeGiB === undefined) {
      throw invalidSpec(where, 'needs an "image" or a "sizeGiB"');
    }
    return disk;
  });
}

function parseNics(v: unknown): NicSpec[] {
  if (!Array.isArray(v)) throw invalidSpec('nics', 'must be an array');
  if (v.length > MAX_NICS) throw invalidSpec('nics', `must have at most ${MAX_NICS} entries`);
  const seen = new Set<string>();
  return v.map((n, i) => {
    const where = `nics[${i}]`;
    if (!isObject(n)) throw invalidSpec(where, 'must be an object');
    onlyKeys(n, ['name', 'network', 'bridge'], where);
    const name = text(n.name, `${where}.name`, 32);
    if (!DEVICE_NAME.test(name)) throw invalidSpec(`${where}.name`, 'must match [a-z][a-z0-9_-]{0,31}');
    if (seen.has(name)) throw invalidSpec(`${where}.name`, `duplicate nic name "${name}"`);
    seen.add(name);
    if ((n.network === undefined) === (n.bridge === undefined)) {
      throw invalidSpec(where, 'needs exactly one of "network" or "bridge"');
    }
    const nic: NicSpec = { name };
    const key = n.network !== undefined ? 'network' : 'bridge';
    const value = text(n[key], `${where}.${key}`, 64);
    if (!NET_NAME.test(value)) throw invalidSpec(`${where}.${key}`, 'is not a valid network or bridge name');
    nic[key] = value;
    return nic;
  });
}

function parsePower(v: unknown, field = 'power'): PowerState {
  if (v !== 'on' && v !== 'off') throw invalidSpec(field, 'must be "on" or "off"');
  return v;
}

/** Parses and validates spec JSON text; throws InvalidSpec naming the field. */
export function parseMachineSpecHandWritten(jsonText: string, limits: SpecLimits): MachineSpec {
  return validateMachineSpec(parseSpecJson(jsonText), limits);
}

function validateMachineSpec(raw: unknown, limits: SpecLimits): MachineSpec {
  if (!isObject(raw)) throw invalidSpec('(spec)', 'must be a JSON object');
  onlyKeys(raw, ['cpus', 'memoryMiB', 'domainType', 'boot', 'disks', 'nics', 'power', 'gracePeriodSec', 'restartPolicy', 'annotations'], '');
  const spec: MachineSpec = {
    cpus: integer(raw.cpus ?? 1, 'cpus', 1, limits.maxCpus),
    memoryMiB: integer(raw.memoryMiB ?? 256, 'memoryMiB', 16, limits.maxMemoryMiB),
    domainType: limits.defaultDomainType,
    disks: raw.disks === undefined ? [] : parseDisks(raw.disks, limits),
    nics: raw.nics === undefined ? [] : parseNics(raw.nics),
    power: raw.power === undefined ? 'on' : parsePower(raw.power),
    annotations: raw.annotations === undefined ? emptyAnnotations() : parseAnnotations(raw.annotations),
  };
  if (raw.domainType !== undefined) {
    if (raw.domainType !== 'kvm' && raw.domainType !== 'qemu') throw invalidSpec('domainType', 'must be "kvm" or "qemu"');
    spec.domainType = raw.domainType;
  }
  if (raw.boot !== undefined) spec.boot = parseBoot(raw.boot, limits);
  if (raw.gracePeriodSec !== undefined) spec.gracePeriodSec = integer(raw.gracePeriodSec, 'gracePeriodSec', 0, MAX_GRACE_SEC);
  if (raw.restartPolicy !== undefined) {
    if (raw.restartPolicy !== 'always' && raw.restartPolicy !== 'never') throw invalidSpec('restartPolicy', 'must be "always" or "never"');
    spec.restartPolicy = raw.restartPolicy;
  }
  if (spec.boot === undefined && spec.disks.length === 0) throw invalidSpec('boot', 'a spec needs "boot" or at least one disk');
  return spec;
}
