import type { DomainDescription, DomainNic } from '../port.js';

// Libvirt domain XML for one machine, built as plain strings, and the two facts read back from it
// (UUID and mark). Every interpolated value goes
// through escapeXml(), so nothing a caller puts in a spec can add elements or attributes.

/** Namespace of the metadata element that marks a domain as created by vmkeeper. */
export const VMKEEPER_XMLNS = 'https://vmkeeper.org/xmlns/machine/1';

const XML_ESCAPES: Record<string, string> = {
  '&': '&amp;',
  '<': '&lt;',
  '>': '&gt;',
  '"': '&quot;',
  "'": '&apos;',
  '\t': '&#9;',
  '\n': '&#10;',
  '\r': '&#13;',
};

// Characters XML 1.0 cannot carry at all (even as references); NUL would also cut libvirt's C string.
const NOT_XML_CHAR = /[\u0000-\u0008\u000b\u000c\u000e-\u001f\ufffe\uffff]|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

/** Escapes text for element content and single- or double-quoted attributes. */
export function escapeXml(value: string | number): string {
  return String(value)
    .replace(NOT_XML_CHAR, '\ufffd')
    .replace(/[&<>"'\t\n\r]/g, (c) => XML_ESCAPES[c]!);
}

/** virtio target device for the i-th disk: vda, vdb, ... (spec allows at most 16). */
export function diskTarget(index: number): string {
  if (!Number.isInteger(index) || index < 0 || index >= 26) throw new Error(`no virtio target for disk index ${index}`);
  return `vd${String.fromCharCode(97 + index)}`;
}

function osXml(boot: DomainDescription['boot']): string[] {
  const lines = ['  <os>', "    <type arch='x86_64' machine='pc'>hvm</type>"];
  if (boot) {
    lines.push(`    <kernel>${escapeXml(boot.kernel)}</kernel>`);
    if (boot.initrd !== undefined) lines.push(`    <initrd>${escapeXml(boot.initrd)}</initrd>`);
    if (boot.cmdline !== undefined) lines.push(`    <cmdline>${escapeXml(boot.cmdline)}</cmdline>`);
  } else {
    lines.push("    <boot dev='hd'/>");
  }
  lines.push('  </os>');
  return lines;
}

function diskXml(file: string, index: number): string[] {
  return [
    "    <disk type='file' device='disk'>",
    "      <driver name='qemu' type='qcow2'/>",
    `      <source file='${escapeXml(file)}'/>`,
    `      <target dev='${diskTarget(index)}' bus='virtio'/>`,
    '    </disk>',
  ];
}

function nicXml(nic: DomainNic): string[] {
  const source = 'network' in nic
    ? ["    <interface type='network'>", `      <source network='${escapeXml(nic.network)}'/>`]
    : ["    <interface type='bridge'>", `      <source bridge='${escapeXml(nic.bridge)}'/>`];
  return [...source, "      <model type='virtio'/>", '    </interface>'];
}

function consoleXml(logFile: string): string[] {
  const path = escapeXml(logFile);
  return [
    "    <serial type='file'>",
    `      <source path='${path}'/>`,
    "      <target port='0'/>",
    '    </serial>',
    "    <console type='file'>",
    `      <source path='${path}'/>`,
    "      <target type='serial' port='0'/>",
    '    </console>',
  ];
}

// Only the mark: annotations change without a redefine, so a copy here would go stale.
function metadataXml(input: DomainDescription): string[] {
  return [
    '  <metadata>',
    `    <vmkeeper:machine xmlns:vmkeeper='${escapeXml(VMKEEPER_XMLNS)}'>`,
    `      <vmkeeper:name>${escapeXml(input.machineName)}</vmkeeper:name>`,
    `      <vmkeeper:createdAt>${escapeXml(new Date(input.createdAt).toISOString())}</vmkeeper:createdAt>`,
    '    </vmkeeper:machine>',
    '  </metadata>',
  ];
}

export function buildDomainXml(input: DomainDescription): string {
  const lines = [
    `<domain type='${escapeXml(input.domainType)}'>`,
    `  <name>${escapeXml(input.domainName)}</name>`,
    `  <uuid>${escapeXml(input.uuid)}</uuid>`,
    ...metadataXml(input),
    `  <memory unit='KiB'>${escapeXml(input.memoryMiB * 1024)}</memory>`,
    `  <vcpu placement='static'>${escapeXml(input.cpus)}</vcpu>`,
    ...osXml(input.boot),
    '  <features>',
    '    <acpi/>',
    '  </features>',
    '  <on_poweroff>destroy</on_poweroff>',
    '  <on_reboot>restart</on_reboot>',
    '  <on_crash>destroy</on_crash>',
    '  <devices>',
    ...input.diskFiles.flatMap(diskXml),
    ...input.nics.flatMap(nicXml),
    ...consoleXml(input.serialLogFile),
    '  </devices>',
    '</domain>',
  ];
  return `${lines.join('\n')}\n`;
}

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

/**
 * The machine named by our metadata mark, or undefined when the XML carries no mark. Libvirt
 * re-serialises metadata (double quotes, its own whitespace), so the reading tolerates both.
 */
export function markedMachineName(xml: string): string | undefined {
  const metadata = /<metadata>([\s\S]*?)<\/metadata>/.exec(xml)?.[1];
  if (metadata === undefined) return undefined;
  const nsDecl = new RegExp(`<([A-Za-z_][\\w.-]*):machine\\s+xmlns:\\1=(["'])${escapeRegExp(VMKEEPER_XMLNS)}\\2`);
  const prefix = nsDecl.exec(metadata)?.[1];
  if (prefix === undefined) return undefined;
  const name = new RegExp(`<${prefix}:name>([^<]*)</${prefix}:name>`).exec(metadata)?.[1];
  return name === undefined ? undefined : unescapeXml(name);
}

/** The domain's own <uuid> (libvirt writes it right after <name>, before any device's). */
export function domainUuid(xml: string): string | undefined {
  return /<uuid>\s*([0-9A-Fa-f-]+)\s*<\/uuid>/.exec(xml)?.[1];
}

const NAMED_ENTITIES: Record<string, string> = { amp: '&', lt: '<', gt: '>', quot: '"', apos: "'" };

function unescapeXml(text: string): string {
  return text.replace(/&(?:#x([0-9A-Fa-f]+)|#(\d+)|(amp|lt|gt|quot|apos));/g, (_, hex?: string, dec?: string, named?: string) =>
    named !== undefined ? NAMED_ENTITIES[named]! : String.fromCodePoint(hex !== undefined ? parseInt(hex, 16) : Number(dec)));
}
