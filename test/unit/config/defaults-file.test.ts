import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { defaultConfig } from '../../../src/config/config.js';
import { loadConfig } from '../../../src/config/load-config.js';
import { fieldKeyPaths } from '../../../src/config/schema.js';

// config/config.yaml is the documented default file: it must load to exactly the built-ins.
const DEFAULTS_FILE = fileURLToPath(new URL('../../../config/config.yaml', import.meta.url));
const DOCS_FILE = fileURLToPath(new URL('../../../docs/configuration.md', import.meta.url));

describe('config/config.yaml', () => {
  it('equals the built-in defaults', () => {
    const { config, configFileFound } = loadConfig({ argv: ['--config', DEFAULTS_FILE], env: {} });
    expect(configFileFound).toBe(true);
    expect(config).toEqual(defaultConfig());
  });

  it('sets every key, each with a comment above it', () => {
    const text = readFileSync(DEFAULTS_FILE, 'utf8');
    const raw = parse(text) as Record<string, Record<string, unknown>>;
    const lines = text.split('\n');
    for (const key of fieldKeyPaths()) {
      const parts = key.split('.');
      const value = parts.length === 1 ? raw[parts[0]!] : raw[parts[0]!]?.[parts[1]!];
      expect(value, key).toBeDefined();
      const leaf = parts.at(-1)!;
      const at = lines.findIndex((l) => new RegExp(`^\\s*${leaf}:`).test(l));
      expect(lines[at - 1], `comment above ${key}`).toMatch(/^\s*#/);
    }
  });

  it('every key is documented in docs/configuration.md', () => {
    const docs = readFileSync(DOCS_FILE, 'utf8');
    for (const key of fieldKeyPaths()) expect(docs, key).toContain(`\`${key}\``);
  });
});
