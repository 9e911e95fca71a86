import { describe, expect, it } from 'vitest';
import type { MachineRecord } from '../../../src/machine/record.js';
import { DEFAULT_SPEC_LIMITS } from '../../../src/machine/spec.js';
import { InvalidStoredRecord, StoredRecordValidator } from '../../../src/store/record-validation.js';
import { makeRecord, makeV1Record } from '../../support/records.js';

// Issue 15: a loaded record is checked exactly as the API checks a new one, with the limits the
// agent was configured with; what would be refused over D-Bus is quarantined, never acted on.

const validator = new StoredRecordValidator(DEFAULT_SPEC_LIMITS);
const good = makeRecord('vm');
const withSpec = (spec: Record<string, unknown>) => ({ ...good, spec: { ...good.spec, ...spec } });
const withStatus = (status: Record<string, unknown>) => ({ ...good, status: { ...good.status, ...status } });
const v1 = makeV1Record('vm');
const v1WithStatus = (status: Record<string, unknown>) => ({ ...v1, status: { ...(v1.status as object), ...status } });
const parse = (record: unknown, v = validator) => v.parse(JSON.stringify(record), 'vm');
const reasonFor = (record: unknown, v = validator) => {
  try {
    parse(record, v);
  } catch (err) {
    expect(err).toBeInstanceOf(InvalidStoredRecord);
    return (err as Error).message;
  }
  throw new Error('the record was accepted');
};

describe('StoredRecordValidator', () => {
  it.each([
    { what: 'a foreign domainName (would touch a domain not ours)', record: { ...good, domainName: 'test' }, reason: 'domainName: must be "vmkeeper-vm", derived from the name' },
    { what: 'a domainName of another machine', record: { ...good, domainName: 'vmkeeper-other' }, reason: /^domainName: must be "vmkeeper-vm"/ },
    { what: 'an image outside the image dirs', record: withSpec({ disks: [{ name: 'root', image: '/etc/shadow' }] }), reason: /^spec\.disks\[0\]\.image: must lie inside an image directory/ },
    { what: 'a kernel outside the image dirs', record: withSpec({ boot: { kernel: '/boot/vmlinuz' } }), reason: /^spec\.boot\.kernel: must lie inside an image directory/ },
    { what: 'an image path with ".."', record: withSpec({ disks: [{ name: 'root', image: '/var/lib/vmkeeper/images/../../../etc/shadow' }] }), reason: /^spec\.disks\[0\]\.image: must be a normalised path/ },
    { what: 'a disk name with "../"', record: withSpec({ disks: [{ name: '../../../tmp/x', sizeGiB: 1 }] }), reason: /^spec\.disks\[0\]\.name: must match/ },
    { what: 'an unknown spec key', record: withSpec({ cpu: 2 }), reason: 'spec.cpu: unknown key' },
    { what: 'cpus over the limit', record: withSpec({ cpus: 100_000 }), reason: /^spec\.cpus: must be between/ },
    { what: 'annotations that are not an object', record: { ...good, annotations: ['x'] }, reason: 'annotations: must be an object' },
    { what: 'a uuid that is not one', record: { ...good, uuid: 'x' }, reason: 'uuid: must be a UUID' },
    { what: 'a negative resourceVersion', record: { ...good, resourceVersion: -1 }, reason: 'resourceVersion: must be a number >= 0' },
    { what: 'createdFiles of the wrong type (v1)', record: v1WithStatus({ createdFiles: 'x' }), reason: 'status.createdFiles: must be a list of strings' },
    { what: 'finalizers of the wrong type (v1)', record: { ...v1, finalizers: 'x' }, reason: 'finalizers: must be a list of strings' },
    { what: 'domainDefined of the wrong type', record: withStatus({ domainDefined: 'yes' }), reason: 'status.domainDefined: must be a boolean' },
  ])('refuses $what', ({ record, reason }) => {
    expect(reasonFor(record)).toEqual(typeof reason === 'string' ? reason : expect.stringMatching(reason));
  });

  it('accepts a record written by the store and returns it unchanged', () => {
    expect(parse(good)).toEqual(good);
  });

  it('an annotation that no longer meets the grammar is dropped with a warning, the machine kept (upgrade)', () => {
    const warnings: string[] = [];
    const older = { ...good, annotations: { owner: 'test', 'Example.com/x': 'upper-case prefix', 'a b': 'space', note: 'carriage\rreturn', n: 7 } };
    const loaded = validator.parse(JSON.stringify(older), 'vm', (w) => warnings.push(w));
    expect({ ...loaded.annotations }).toEqual({ owner: 'test' });
    expect(warnings).toEqual(['annotations: dropped 4 that do not meet the annotation grammar (docs/dbus-api.md)']);
    expect(warnings.join()).not.toMatch(/carriage|upper-case/);
  });

  it('drops the copy of the annotations an older record kept in its spec', () => {
    const older = { ...v1, spec: { ...good.spec, annotations: { stale: 'copy' } } };
    const loaded = parse(older);
    expect(loaded.spec).not.toHaveProperty('annotations');
    expect(loaded.annotations).toEqual({ owner: 'test' });
  });

  it('a current record keeps its annotations once: one in its spec is refused', () => {
    expect(reasonFor(withSpec({ annotations: { stale: 'copy' } }))).toBe('spec.annotations: unknown key');
  });

  it('tolerates v1 records with and without the unused status fields', () => {
    const { domainDefined: _d, createdFiles: _c, forceStoppedAt: _f, ...slim } = v1.status as MachineRecord['status'] & Record<string, unknown>;
    expect(parse({ ...v1, status: slim }).status).toEqual({ ...good.status, domainDefined: false, forceStoppedAt: 0 });
    expect(parse(v1WithStatus({ domainDefined: true, createdFiles: ['a'] })).status).toEqual({ ...good.status, domainDefined: true });
  });

  it('drops what an unknown writer added instead of carrying it along', () => {
    expect(parse({ ...good, extra: 1, status: { ...good.status, createdFiles: ['a'] } })).toEqual(good);
  });

  it('uses the limits it is given: an image dir the agent is configured with', () => {
    const record = withSpec({ boot: { kernel: '/srv/images/vmlinuz' } });
    expect(reasonFor(record)).toMatch(/^spec\.boot\.kernel: must lie inside an image directory \(\/var\/lib\/vmkeeper\/images\)$/);
    const configured = new StoredRecordValidator({ ...DEFAULT_SPEC_LIMITS, imageDirectories: ['/srv/images'] });
    expect(parse(record, configured).spec.boot).toEqual({ kernel: '/srv/images/vmlinuz' });
  });
});
