import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { buildDomainXml, domainUuid, escapeXml, markedMachineName, VMKEEPER_XMLNS } from '../../../../src/hypervisor/libvirt/domain-xml.js';
import type { DomainDescription } from '../../../../src/hypervisor/port.js';

// A tiny strict XML reader for the generated subset (elements, quoted attributes, text, the five
// entities and numeric references): enough to prove structure without an XML library.
interface El {
  name: string;
  attrs: Record<string, string>;
  children: El[];
  text: string;
}

function decode(s: string): string {
  if (/[<>]/.test(s)) throw new Error(`raw markup character in text: ${s}`);
  return s.replace(/&(amp|lt|gt|quot|apos|#\d+);|&/g, (m, ent: string | undefined) => {
    if (!ent) throw new Error(`bare & in ${s}`);
    const named: Record<string, string> = { amp: '&', lt: '<', gt: '>', quot: '"', apos: "'" };
    return named[ent] ?? String.fromCodePoint(Number(ent.slice(1)));
  });
}

function parseXml(xml: string): El {
  const tag = /<(\/?)([A-Za-z_][\w:.-]*)((?:\s+[\w:.-]+=(?:'[^'<]*'|"[^"<]*"))*)\s*(\/?)>/y;
  const root: El = { name: '#document', attrs: {}, children: [], text: '' };
  const stack = [root];
  let pos = 0;
  while (pos < xml.length) {
    const lt = xml.indexOf('<', pos);
    const textEnd = lt === -1 ? xml.length : lt;
    stack[stack.length - 1]!.text += decode(xml.slice(pos, textEnd));
    if (lt === -1) break;
    tag.lastIndex = lt;
    const m = tag.exec(xml);
    if (!m) throw new Error(`malformed tag at ${lt}: ${xml.slice(lt, lt + 40)}`);
    const [, close, name, attrText, selfClose] = m;
    if (close) {
      if (stack.pop()!.name !== name) throw new Error(`mismatched </${name}>`);
    } else {
      const attrs: Record<string, string> = {};
      for (const a of attrText!.matchAll(/([\w:.-]+)=(?:'([^']*)'|"([^"]*)")/g)) attrs[a[1]!] = decode(a[2] ?? a[3]!);
      const el: El = { name: name!, attrs, children: [], text: '' };
      stack[stack.length - 1]!.children.push(el);
      if (!selfClose) stack.push(el);
    }
    pos = tag.lastIndex;
  }
  if (stack.length !== 1) throw new Error('unclosed elements');
  if (root.children.length !== 1 || root.text.trim() !== '') throw new Error('not exactly one root element');
  return root.children[0]!;
}

const all = (el: El, name: string): El[] => [...(el.name === name ? [el] : []), ...el.children.flatMap((c) => all(c, name))];
const one = (el: El, name: string): El => {
  const found = all(el, name);
  if (found.length !== 1) throw new Error(`expected one <${name}>, found ${found.length}`);
  return found[0]!;
};

function input(over: Partial<DomainDescription> = {}): DomainDescription {
  return {
    domainName: 'vmkeeper-web-1',
    uuid: '3357c3af-fdcf-4e1b-b97b-346ece2f943a',
    machineName: 'web-1',
    domainType: 'kvm',
    cpus: 2,
    memoryMiB: 256,
    diskFiles: ['/var/lib/vmkeeper/guests/web-1/disk-root.qcow2', '/var/lib/vmkeeper/guests/web-1/disk-data.qcow2'],
    nics: [{ network: 'default' }, { bridge: 'br0' }],
    serialLogFile: '/var/lib/vmkeeper/guests/web-1/serial.log',
    createdAt: Date.UTC(2026, 0, 1),
    ...over,
  };
}

describe('buildDomainXml', () => {
  it('describes the machine', () => {
    const dom = parseXml(buildDomainXml(input()));
    expect(dom.name).toBe('domain');
    expect(dom.attrs.type).toBe('kvm');
    expect(one(dom, 'name').text).toBe('vmkeeper-web-1');
    expect(one(dom, 'uuid').text).toBe('3357c3af-fdcf-4e1b-b97b-346ece2f943a');
    expect(one(dom, 'memory')).toMatchObject({ attrs: { unit: 'KiB' }, text: '262144' });
    expect(one(dom, 'vcpu').text).toBe('2');
    expect(one(dom, 'type')).toMatchObject({ attrs: { arch: 'x86_64', machine: 'pc' }, text: 'hvm' });
    expect(one(dom, 'boot').attrs.dev).toBe('hd');
    expect(all(dom, 'kernel')).toHaveLength(0);
    expect(all(one(dom, 'features'), 'acpi')).toHaveLength(1);
    expect([one(dom, 'on_poweroff').text, one(dom, 'on_reboot').text, one(dom, 'on_crash').text]).toEqual(['destroy', 'restart', 'destroy']);
    expect(all(dom, 'disk').map((d) => [one(d, 'source').attrs.file, one(d, 'target').attrs.dev, one(d, 'driver').attrs.type])).toEqual([
      ['/var/lib/vmkeeper/guests/web-1/disk-root.qcow2', 'vda', 'qcow2'],
      ['/var/lib/vmkeeper/guests/web-1/disk-data.qcow2', 'vdb', 'qcow2'],
    ]);
    expect(all(dom, 'interface').map((i) => [i.attrs.type, one(i, 'source').attrs, one(i, 'model').attrs.type])).toEqual([
      ['network', { network: 'default' }, 'virtio'],
      ['bridge', { bridge: 'br0' }, 'virtio'],
    ]);
    expect(one(one(dom, 'serial'), 'source').attrs.path).toBe('/var/lib/vmkeeper/guests/web-1/serial.log');
    expect(one(dom, 'console').attrs.type).toBe('file');
    const marker = one(dom, 'vmkeeper:machine');
    expect(marker.attrs['xmlns:vmkeeper']).toBe(VMKEEPER_XMLNS);
    expect(one(marker, 'vmkeeper:name').text).toBe('web-1');
    expect(one(marker, 'vmkeeper:createdAt').text).toBe('2026-01-01T00:00:00.000Z');
  });

  it('uses direct kernel boot when the description has boot', () => {
    const boot = { kernel: '/img/vmlinuz', initrd: '/img/initrd.img', cmdline: 'console=ttyS0 quiet' };
    const os = one(parseXml(buildDomainXml(input({ boot, diskFiles: [] }))), 'os');
    expect([one(os, 'kernel').text, one(os, 'initrd').text, one(os, 'cmdline').text]).toEqual([boot.kernel, boot.initrd, boot.cmdline]);
    expect(all(os, 'boot')).toHaveLength(0);
  });

  const hostile = [
    ["'/><devices><disk", "'"],
    ['</cmdline><devices><disk type="file"><source file="/etc/shadow"/></disk></devices>', '"'],
    ['x]]><!-- <![CDATA[ &amp; &#60; ', '&'],
  ] as const;

  const cases: { what: string; make: (h: string) => DomainDescription; read: (dom: El) => string }[] = [
    { what: 'cmdline', make: (h) => input({ boot: { kernel: '/img/k', cmdline: h }, diskFiles: [] }), read: (d) => one(d, 'cmdline').text },
    { what: 'kernel path', make: (h) => input({ boot: { kernel: `/img/${h}` }, diskFiles: [] }), read: (d) => one(d, 'kernel').text.slice(5) },
    { what: 'network name', make: (h) => input({ nics: [{ network: h }] }), read: (d) => one(one(d, 'interface'), 'source').attrs.network! },
    { what: 'bridge name', make: (h) => input({ nics: [{ bridge: h }] }), read: (d) => one(one(d, 'interface'), 'source').attrs.bridge! },
    { what: 'disk file', make: (h) => input({ diskFiles: [`/s/${h}`, '/s/d'] }), read: (d) => one(all(d, 'disk')[0]!, 'source').attrs.file!.slice(3) },
    { what: 'serial log path', make: (h) => input({ serialLogFile: h }), read: (d) => one(one(d, 'serial'), 'source').attrs.path! },
    { what: 'domain name', make: (h) => input({ domainName: h }), read: (d) => one(d, 'name').text },
  ];

  describe.each(cases)('a hostile $what', ({ make, read }) => {
    it.each(hostile)('cannot inject markup: %s', (text) => {
      const xml = buildDomainXml(make(text));
      const dom = parseXml(xml); // throws unless exactly one well-formed <domain> root
      expect(dom.name).toBe('domain');
      expect(all(dom, 'devices')).toHaveLength(1);
      expect(all(dom, 'metadata')).toHaveLength(1);
      expect(read(dom)).toBe(text);
      expect(xml).not.toContain(text);
      expect(xml).toContain(escapeXml(text));
    });
  });

  it('carries only the vmkeeper mark in its metadata, no annotations (they change without a redefine)', () => {
    // A caller that hands over more than the description (say, a whole record) still gets only the mark.
    const withAnnotations = { ...input(), annotations: { owner: 'team-a' } } as DomainDescription;
    const machine = one(one(parseXml(buildDomainXml(withAnnotations)), 'metadata'), 'vmkeeper:machine');
    expect(machine.children.map((c) => c.name)).toEqual(['vmkeeper:name', 'vmkeeper:createdAt']);
  });

  it('replaces characters XML cannot carry (NUL would also cut the C string)', () => {
    const dom = parseXml(buildDomainXml(input({ boot: { kernel: '/img/k', cmdline: 'a\u0000b\u0007c\ud800d\ne' }, diskFiles: [] })));
    expect(one(dom, 'cmdline').text).toBe('a\ufffdb\ufffdc\ufffdd\ne');
  });

  it('validates against the libvirt schema (virt-xml-validate)', async (ctx) => {
    const run = promisify(execFile);
    const have = async (bin: string) => run('sh', ['-c', `command -v ${bin}`]).then(() => true, () => false);
    // virt-xml-validate is a shell script around xmllint: both must be there.
    if (!(await have('virt-xml-validate')) || !(await have('xmllint'))) return ctx.skip();
    const dir = await mkdtemp(path.join(os.tmpdir(), 'vmkeeper-xml-'));
    try {
      const hostileBoot = { kernel: '/img/k', initrd: '/img/i', cmdline: hostile[1]![0] };
      const variants = {
        disks: buildDomainXml(input({ serialLogFile: `/s/${hostile[0]![0]}\u0000` })),
        boot: buildDomainXml(input({ boot: hostileBoot, diskFiles: [], nics: [], domainType: 'qemu' })),
      };
      for (const [name, xml] of Object.entries(variants)) {
        const file = path.join(dir, `${name}.xml`);
        await writeFile(file, xml);
        const { stdout, stderr } = await run('virt-xml-validate', [file, 'domain']);
        expect(`${stdout}${stderr}`).toContain('validates');
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('markedMachineName: is this XML ours (for this machine)?', () => {
  const isOurs = (xml: string, machine: string | undefined) => {
    const marked = markedMachineName(xml);
    return machine === undefined ? marked !== undefined : marked === machine;
  };
  const ours = buildDomainXml(input());
  // What libvirt hands back: double quotes and its own layout.
  const reserialised = ours.replace(/'/g, '"');

  it.each([
    ['our XML', ours, undefined, true],
    ['our XML, this machine', ours, 'web-1', true],
    ['our XML, another machine', ours, 'web-2', false],
    ['libvirt re-serialised', reserialised, 'web-1', true],
    ['a host domain', "<domain type='kvm'><name>db</name></domain>", undefined, false],
    ['other metadata', "<domain><metadata><app:x xmlns:app='https://example.org/'><app:name>web-1</app:name></app:x></metadata></domain>", 'web-1', false],
    ['marker text outside metadata', `<domain><description>${VMKEEPER_XMLNS} vmkeeper:machine</description></domain>`, undefined, false],
    ['a cmdline imitating the marker', buildDomainXml(input({ machineName: 'x', boot: { kernel: '/img/k', cmdline: '<vmkeeper:name>web-1</vmkeeper:name>' }, diskFiles: [] })), 'web-1', false],
  ] as const)('%s', (_, xml, machine, expected) => {
    expect(isOurs(xml, machine)).toBe(expected);
  });

  it('reads back a machine name that needed escaping', () => {
    const xml = buildDomainXml(input({ machineName: `a&b<c>'d"` }));
    expect(markedMachineName(xml)).toBe(`a&b<c>'d"`);
    expect(markedMachineName(xml.replace(/'/g, '"').replace('&amp;', '&#38;'))).toBe(`a&b<c>'d"`);
  });
});

describe('domainUuid', () => {
  it.each([
    ['the domain UUID, not a device one', buildDomainXml(input()), '3357c3af-fdcf-4e1b-b97b-346ece2f943a'],
    ['libvirt layout with whitespace', '<domain>\n  <name>x</name>\n  <uuid> 6F1C3A52-6A5E-4D4E-9A0F-2F4B8C1D2E3F </uuid>\n</domain>', '6F1C3A52-6A5E-4D4E-9A0F-2F4B8C1D2E3F'],
    ['no UUID at all', "<domain type='kvm'><name>db</name></domain>", undefined],
  ] as const)('%s', (_, xml, expected) => {
    expect(domainUuid(xml)).toBe(expected);
  });
});
