import path from 'node:path';
import * as v from 'valibot';
import { annotationsSchema, emptyAnnotations } from './annotations.js';
import { integerIn, namedList, oneOf, strictJsonObject, text } from './field-schemas.js';

// Machine spec, version 1 (docs/dbus-api.md), as a schema: the types in spec.ts come from here.
// Built per SpecLimits, since the image directories and maxima are the agent's configuration.

export interface SpecLimits {
  imageDirectories: string[];
  maxCpus: number;
  maxMemoryMiB: number;
  maxDiskGiB: number;
  defaultDomainType: 'kvm' | 'qemu';
}

const MAX_DISKS = 16;
const MAX_NICS = 16;
const MAX_GRACE_SEC = 24 * 3600;
/** Shutdown and start priorities: 0 (the default, last to stop and to start) to this. */
export const MAX_PRIORITY = 1000;
export const HOST_SHUTDOWN_ACTIONS = ['shutdown', 'save', 'force'] as const;
const DEVICE_NAME = /^[a-z][a-z0-9_-]{0,31}$/;
const NET_NAME = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$/;

export const powerSchema = oneOf(['on', 'off']);

/** An absolute, normalised path inside one of the image directories, so a guest never gets /etc/shadow. */
export function imagePathSchema(imageDirectories: readonly string[]) {
  const bases = imageDirectories.map((dir) => (dir.endsWith('/') ? dir : `${dir}/`));
  return v.pipe(
    text(4096),
    v.check((p) => path.isAbsolute(p), 'must be an absolute path'),
    v.check((p) => path.normalize(p) === p && !p.split('/').includes('..'), 'must be a normalised path without ".."'),
    v.check(
      (p) => bases.some((base) => p.startsWith(base) && p.length > base.length),
      `must lie inside an image directory (${imageDirectories.join(', ')})`,
    ),
  );
}

const deviceName = v.pipe(text(32), v.regex(DEVICE_NAME, 'must match [a-z][a-z0-9_-]{0,31}'));
const networkName = v.pipe(text(64), v.regex(NET_NAME, 'is not a valid network or bridge name'));

function bootSchema(image: ReturnType<typeof imagePathSchema>) {
  return strictJsonObject({ kernel: image, initrd: v.optional(image), cmdline: v.optional(text(2048)) });
}

function diskSchema(image: ReturnType<typeof imagePathSchema>, maxDiskGiB: number) {
  return v.pipe(
    strictJsonObject({ name: deviceName, image: v.optional(image), sizeGiB: v.optional(integerIn(1, maxDiskGiB)) }, 'must be a string'),
    v.check((d) => d.image !== undefined || d.sizeGiB !== undefined, 'needs an "image" or a "sizeGiB"'),
  );
}

const nicSchema = v.pipe(
  strictJsonObject({ name: deviceName, network: v.optional(networkName), bridge: v.optional(networkName) }, 'must be a string'),
  v.check((n) => (n.network === undefined) !== (n.bridge === undefined), 'needs exactly one of "network" or "bridge"'),
);

export function machineSpecSchema(limits: SpecLimits) {
  const image = imagePathSchema(limits.imageDirectories);
  return v.pipe(
    v.custom<Record<string, unknown>>((raw) => typeof raw === 'object' && raw !== null && !Array.isArray(raw), 'must be a JSON object'),
    strictJsonObject({
      cpus: v.nullish(integerIn(1, limits.maxCpus), 1),
      memoryMiB: v.nullish(integerIn(16, limits.maxMemoryMiB), 256),
      domainType: v.optional(oneOf(['kvm', 'qemu']), limits.defaultDomainType),
      disks: v.optional(namedList(diskSchema(image, limits.maxDiskGiB), MAX_DISKS, 'disk'), () => []),
      nics: v.optional(namedList(nicSchema, MAX_NICS, 'nic'), () => []),
      power: v.optional(powerSchema, 'on'),
      annotations: v.optional(annotationsSchema, emptyAnnotations),
      boot: v.optional(bootSchema(image)),
      gracePeriodSec: v.optional(integerIn(0, MAX_GRACE_SEC)),
      /** Absent means "always": restart with backoff (docs/operations.md). */
      restartPolicy: v.optional(oneOf(['always', 'never'])),
      /** At host shutdown and drain; absent means "shutdown" (docs/operations.md, "Host lifecycle"). */
      hostShutdownAction: v.optional(oneOf(HOST_SHUTDOWN_ACTIONS)),
      /** Higher stops first at host shutdown and drain; absent means 0. */
      shutdownPriority: v.optional(integerIn(0, MAX_PRIORITY)),
      /** Higher starts first when guests are restored after boot or undrain; absent means 0. */
      startPriority: v.optional(integerIn(0, MAX_PRIORITY)),
    }),
    v.rawCheck(({ dataset, addIssue }) => {
      if (!dataset.typed || dataset.value.boot !== undefined || dataset.value.disks.length > 0) return;
      addIssue({
        message: 'a spec needs "boot" or at least one disk',
        path: [{ type: 'object', origin: 'value', input: dataset.value, key: 'boot', value: undefined }],
      });
    }),
  );
}
