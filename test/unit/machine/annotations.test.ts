import { afterEach, describe, expect, it } from 'vitest';
import { Harness } from '../../support/agent-harness.js';
import { machineProperties } from '../../../src/dbus/machine-interface.js';
import { buildDomainXml } from '../../../src/hypervisor/libvirt/domain-xml.js';
import { MAX_ANNOTATIONS_BYTES, parseAnnotations } from '../../../src/machine/annotations.js';
import { describeRecord } from '../../../src/machine/describe.js';
import { domainNameFor } from '../../../src/machine/names.js';
import { specView, type MachineRecord } from '../../../src/machine/record.js';
import { DEFAULT_SPEC_LIMITS, parseMachineSpec } from '../../../src/machine/spec.js';

let h: Harness | undefined;
afterEach(async () => {
  await h?.agent.stop();
  h = undefined;
});

const SPEC = JSON.stringify({ disks: [{ name: 'root', sizeGiB: 1 }], annotations: { owner: 'team-a' } });

describe('SetMachineAnnotations leaves no stale copy (Spec property, DescribeMachine, domain XML)', () => {
  it('after set annotations, the Spec property, DescribeMachine and the domain XML all agree', async () => {
    h = await new Harness().start();
    await h.createRunning('web-1', SPEC);
    await h.service.setAnnotations('web-1', { team: 'b' });
    const record = h.service.get('web-1');
    const spec = JSON.parse(machineProperties(record, 30).Spec as string);
    const described = JSON.parse(describeRecord(record));
    expect(record.annotations).toEqual({ team: 'b' });
    expect(spec.annotations).toEqual({ team: 'b' });
    expect(described.spec.annotations).toEqual({ team: 'b' });
    expect(described.metadata.annotations).toEqual({ team: 'b' });
    const xml = buildDomainXml(h.hv.descriptionOf(domainNameFor('web-1'))!);
    expect(xml).not.toContain('team-a');
    expect(xml).not.toContain('annotation');
  });

  it('stores the spec without annotations: the record keeps the one copy', async () => {
    h = await new Harness().start();
    const created = await h.service.create('web-2', SPEC);
    expect(created.spec).not.toHaveProperty('annotations');
    expect(created.annotations).toEqual({ owner: 'team-a' });
  });

  it('shows the record annotations, never a copy left in an older record spec', () => {
    const spec = parseMachineSpec('{"disks":[{"name":"root","sizeGiB":1}]}', DEFAULT_SPEC_LIMITS);
    const older = { annotations: { now: 'yes' }, spec: { ...spec, annotations: { stale: 'yes' } } } as unknown as MachineRecord;
    expect(specView(older).annotations).toEqual({ now: 'yes' });
  });
});

describe('annotation grammar', () => {
  const long = (n: number) => 'a'.repeat(n);
  it.each([
    ['owner'],
    ['vmkeeper.org/owner'],
    ['a.b-c_d'],
    [`${long(253)}/x`],
    [long(63)],
    ['A9'],
  ])('accepts the key %s', (key) => {
    expect(Object.keys(parseAnnotations({ [key]: 'v' }))).toEqual([key]);
  });

  it.each([
    ['constructor', /reserved/],
    ['toString', /reserved/],
    ['hasOwnProperty', /reserved/],
    ['__proto__', /reserved/],
    ['', /name must be/],
    ['-a', /name must be/],
    ['a-', /name must be/],
    ['a b', /name must be/],
    [long(64), /name must be/],
    ['/x', /prefix/],
    ['Example.com/x', /prefix/],
    ['a..b/x', /prefix/],
    [`${long(254)}/x`, /prefix/],
    ['a/b/c', /name must be/],
    ['a/', /name must be/],
    ['ключ', /name must be/],
  ])('refuses the key %j as InvalidSpec', (key, why) => {
    const entries = JSON.parse(`{${JSON.stringify(key)}:"v"}`) as Record<string, string>; // an own "__proto__" too
    expect(() => parseAnnotations(entries)).toThrow(expect.objectContaining({ kind: 'InvalidSpec', message: expect.stringMatching(why) }));
  });

  it.each([
    ['NUL', 'a\u0000b', /control characters/],
    ['a carriage return', 'a\rb', /control characters/],
    ['DEL', 'a\u007fb', /control characters/],
    ['a C1 control', 'a\u0085b', /control characters/],
    ['U+FFFE', 'a\ufffeb', /noncharacters/],
    ['U+FFFF', 'a\uffffb', /noncharacters/],
    ['U+FDD0', '\ufdd0', /noncharacters/],
    ['U+10FFFF', '\u{10ffff}', /noncharacters/],
    ['U+1FFFE', '\u{1fffe}', /noncharacters/],
    ['a lone high surrogate', 'a\ud800', /UTF-8/],
    ['a lone low surrogate', '\udc00b', /UTF-8/],
  ])('refuses a value with %s', (_, value, why) => {
    expect(() => parseAnnotations({ note: value })).toThrow(expect.objectContaining({ kind: 'InvalidSpec', message: expect.stringMatching(why) }));
  });

  it('accepts tab, newline, emoji and non-Latin text in values', () => {
    const value = 'line 1\n\tline 2 \u{1f600} ключ \ufdcf \ufffd';
    expect(parseAnnotations({ note: value }).note).toBe(value);
  });

  it('bounds the total size of keys and values', () => {
    const half = 'x'.repeat(MAX_ANNOTATIONS_BYTES / 2);
    expect(() => parseAnnotations({ a: half, b: half })).toThrow(/must total at most 65536 bytes/);
    expect(Object.keys(parseAnnotations({ a: half.slice(1), b: half.slice(1) }))).toEqual(['a', 'b']);
  });

  it('builds maps without a prototype, so no key reaches Object.prototype', () => {
    const parsed = parseAnnotations({ owner: 'x' });
    expect(Object.getPrototypeOf(parsed)).toBeNull();
  });

  it('refuses a bad annotation and changes nothing on the machine', async () => {
    h = await new Harness().start();
    await h.createRunning('web-1', SPEC);
    const before = JSON.stringify(h.service.get('web-1'));
    await expect(h.service.setAnnotations('web-1', { constructor: 'x' })).rejects.toMatchObject({ kind: 'InvalidSpec' });
    await expect(h.service.setAnnotations('web-1', { note: 'a\u0000' })).rejects.toMatchObject({ kind: 'InvalidSpec' });
    expect(JSON.stringify(h.service.get('web-1'))).toBe(before);
  });
});
