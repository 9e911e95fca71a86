import { describe, expect, it } from 'vitest';
import { DEFAULT_SPEC_LIMITS, parseMachineSpec, type SpecLimits } from '../../../src/machine/spec.js';
import { AgentError } from '../../../src/machine/errors.js';

const limits: SpecLimits = { ...DEFAULT_SPEC_LIMITS, imageDirectories: ['/var/lib/vmkeeper/images'] };
const IMG = '/var/lib/vmkeeper/images';

function invalid(spec: unknown): string {
  try {
    parseMachineSpec(typeof spec === 'string' ? spec : JSON.stringify(spec), limits);
  } catch (err) {
    expect(err).toBeInstanceOf(AgentError);
    expect((err as AgentError).kind).toBe('InvalidSpec');
    return (err as AgentError).message;
  }
  throw new Error('spec was accepted');
}

describe('parseMachineSpec', () => {
  it('accepts the documented example and fills defaults', () => {
    const spec = parseMachineSpec(JSON.stringify({
      cpus: 1, memoryMiB: 256, domainType: 'kvm',
      boot: { kernel: `${IMG}/vmlinuz`, initrd: `${IMG}/initrd.img`, cmdline: 'console=ttyS0' },
      disks: [{ name: 'root', image: `${IMG}/debian-12.qcow2`, sizeGiB: 10 }],
      nics: [{ name: 'eth0', network: 'default' }, { name: 'eth1', bridge: 'br0' }],
      power: 'on', gracePeriodSec: 60, annotations: { owner: 'team-a' },
    }), limits);
    expect(spec.disks[0]).toEqual({ name: 'root', image: `${IMG}/debian-12.qcow2`, sizeGiB: 10 });
    expect(spec.nics[1]).toEqual({ name: 'eth1', bridge: 'br0' });
    const minimal = parseMachineSpec('{"disks":[{"name":"root","sizeGiB":1}]}', limits);
    expect(minimal).toMatchObject({ cpus: 1, memoryMiB: 256, power: 'on', domainType: 'kvm', nics: [], annotations: {} });
  });

  it.each<[string, unknown, RegExp]>([
    ['bad JSON', '{"cpus":', /not valid JSON/],
    ['not an object', '[1]', /must be a JSON object/],
    ['unknown key', { cpus: 1, disk: [] }, /"disk": unknown key/],
    ['unknown nested key', { disks: [{ name: 'r', sizeGiB: 1, format: 'raw' }] }, /disks\[0\]\.format": unknown key/],
    ['fractional cpus', { cpus: 1.5, disks: [{ name: 'r', sizeGiB: 1 }] }, /"cpus": must be an integer/],
    ['string memory', { memoryMiB: '256', disks: [{ name: 'r', sizeGiB: 1 }] }, /"memoryMiB": must be an integer/],
    ['zero cpus', { cpus: 0, disks: [{ name: 'r', sizeGiB: 1 }] }, /"cpus": must be between/],
    ['neither boot nor disks', { cpus: 1 }, /needs "boot" or at least one disk/],
    ['path outside image dirs', { boot: { kernel: '/etc/shadow' } }, /boot.kernel.*image directory/],
    ['traversal', { boot: { kernel: `${IMG}/../../../etc/shadow` } }, /boot.kernel.*normalised/],
    ['relative path', { disks: [{ name: 'r', image: 'images/x.qcow2' }] }, /absolute path/],
    ['image dir itself', { disks: [{ name: 'r', image: `${IMG}/` }] }, /normalised|image directory/],
    ['prefix trick', { disks: [{ name: 'r', image: `${IMG}-evil/x.qcow2` }] }, /image directory/],
    ['disk without image or size', { disks: [{ name: 'r' }] }, /needs an "image" or a "sizeGiB"/],
    ['duplicate disk', { disks: [{ name: 'r', sizeGiB: 1 }, { name: 'r', sizeGiB: 1 }] }, /duplicate disk/],
    ['nic with both', { disks: [{ name: 'r', sizeGiB: 1 }], nics: [{ name: 'e', network: 'a', bridge: 'b' }] }, /exactly one/],
    ['xml in network name', { disks: [{ name: 'r', sizeGiB: 1 }], nics: [{ name: 'e', network: "a'/><x" }] }, /not a valid network/],
    ['bad power', { power: 'maybe', disks: [{ name: 'r', sizeGiB: 1 }] }, /"power": must be "on" or "off"/],
    ['negative grace', { gracePeriodSec: -1, disks: [{ name: 'r', sizeGiB: 1 }] }, /gracePeriodSec/],
    ['annotation not a string', { annotations: { a: 1 }, disks: [{ name: 'r', sizeGiB: 1 }] }, /annotations.a": must be a string/],
    ['control char in cmdline', { boot: { kernel: `${IMG}/k`, cmdline: 'a\u0000b' } }, /control characters/],
    ['noncharacter in cmdline', { boot: { kernel: `${IMG}/k`, cmdline: 'a\ufffeb' } }, /boot.cmdline.*noncharacters/],
    ['lone surrogate in a kernel path', { boot: { kernel: `${IMG}/k\ud800` } }, /boot.kernel.*UTF-8/],
    ['C1 control in an image path', { disks: [{ name: 'r', image: `${IMG}/a\u0085.qcow2` }] }, /control characters/],
    ['reserved annotation key', { annotations: { constructor: 'x' }, disks: [{ name: 'r', sizeGiB: 1 }] }, /annotations\["constructor"\].*reserved/],
    ['huge spec', `{"annotations":{"a":"${'x'.repeat(70_000)}"}}`, /at most 65536 bytes/],
  ])('rejects %s', (_name, spec, message) => {
    expect(invalid(spec)).toMatch(message);
  });
});
