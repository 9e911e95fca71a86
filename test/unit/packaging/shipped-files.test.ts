import path from 'node:path';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

// The packages ship dist/, and dist/ is what tsconfig.build.json compiles: checking the build's
// own file list (not a guess at it) keeps fakes, fake clocks and test hooks out of the packages.
const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
const SRC = path.join(REPO, 'src');

// A file or folder whose name says it exists for tests.
const TEST_CODE = /(^|\/)(fakes?|mocks?|stubs?|tests?|__tests__)\/|(^|\/)(fake|mock|stub|test)-[^/]*$|\.(test|spec)\.ts$/;

function buildConfig(): ts.ParsedCommandLine {
  const parsed = ts.getParsedCommandLineOfConfigFile(path.join(REPO, 'tsconfig.build.json'), {}, {
    ...ts.sys,
    onUnRecoverableConfigFileDiagnostic: (d) => {
      throw new Error(ts.flattenDiagnosticMessageText(d.messageText, '\n'));
    },
  });
  if (!parsed) throw new Error('tsconfig.build.json did not parse');
  return parsed;
}

const relative = (file: string) => path.relative(REPO, file).split(path.sep).join('/');

describe('what the build ships', () => {
  const config = buildConfig();
  const inputs = config.fileNames.map(relative);

  it('compiles src/ alone, into dist/', () => {
    expect(config.options.rootDir).toBe(SRC);
    expect(relative(config.options.outDir!)).toBe('dist');
    expect(inputs.length).toBeGreaterThan(0);
    expect(inputs.filter((f) => !f.startsWith('src/'))).toEqual([]);
  });

  it('has no file named as test code', () => {
    expect(inputs.filter((f) => TEST_CODE.test(f))).toEqual([]);
  });

  it('imports nothing from outside src/ (test/support, bench) by a relative path', () => {
    const outside: string[] = [];
    for (const file of config.fileNames) {
      for (const { fileName: specifier } of ts.preProcessFile(readFileSync(file, 'utf8'), true, true).importedFiles) {
        if (!specifier.startsWith('.')) continue;
        const target = path.resolve(path.dirname(file), specifier);
        if (!target.startsWith(SRC + path.sep)) outside.push(`${relative(file)} -> ${specifier}`);
      }
    }
    expect(outside).toEqual([]);
  });
});
