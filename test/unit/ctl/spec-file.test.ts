import { describe, expect, it } from 'vitest';
import { fieldPath, invalidField, parseSpecText } from '../../../src/ctl/spec-file.js';

describe('spec files', () => {
  it.each<[string, Array<string | number>]>([
    ['cpus', ['cpus']],
    ['disks[0].sizeGiB', ['disks', 0, 'sizeGiB']],
    ['boot.kernel', ['boot', 'kernel']],
    ['nics[12]', ['nics', 12]],
  ])('fieldPath(%s)', (field, path) => expect(fieldPath(field)).toEqual(path));

  it('turns YAML and JSON into the same JSON text', () => {
    const yaml = parseSpecText('cpus: 1\nboot:\n  kernel: /img/vmlinuz\n  cmdline: "console=ttyS0"\n', 'a.yaml');
    const json = parseSpecText('{"cpus":1,"boot":{"kernel":"/img/vmlinuz","cmdline":"console=ttyS0"}}', 'a.json');
    expect(yaml.json).toBe(json.json);
    // YAML 1.2 core schema: no surprise booleans or dates.
    expect(parseSpecText('power: off\nannotations: {when: 2026-01-01, yes: no}\n', 'b').json).toBe('{"power":"off","annotations":{"when":"2026-01-01","yes":"no"}}');
  });

  it('locates a field, or its nearest existing parent', () => {
    const src = parseSpecText('cpus: 1\nboot:\n  cmdline: x\ndisks:\n  - name: root\n    sizeGiB: 0\n', 's.yaml');
    expect(src.locate('disks[0].sizeGiB')).toBe('s.yaml:6');
    expect(src.locate('boot.kernel')).toBe('s.yaml:3');
    expect(src.locate('cpus')).toBe('s.yaml:1');
    expect(src.locate('gpu')).toBeUndefined();
  });

  it('finds the field in an InvalidSpec message', () => {
    expect(invalidField('invalid spec: spec field "nics[1].bridge": must be a string')).toBe('nics[1].bridge');
    expect(invalidField('invalid spec: spec is not JSON')).toBeUndefined();
  });
});
