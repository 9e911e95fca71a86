import { readFileSync } from 'node:fs';
import { isMap, isSeq, LineCounter, parseDocument, type Document } from 'yaml';
import { type Config, DEFAULT_CONFIG_PATH, defaultConfig } from './config.js';
import type * as v from 'valibot';
import { validate } from '../machine/schema-issues.js';
import { ConfigError } from './errors.js';
import { type Flags, parseFlags } from './flags.js';
import { imageDirProblem, stateDirProblem } from './path-rules.js';
import { CONFIG_FIELDS, CONFIG_FILE_SCHEMA, type KeyPath, absolutePath, applyGiven, formatKeyPath } from './schema.js';

// Built-in defaults < STATE_DIRECTORY / systemd log detection < config file < flags.

export interface LoadConfigOptions {
  /** Arguments after the script path: process.argv.slice(2). */
  argv: readonly string[];
  env: NodeJS.ProcessEnv;
  /** Reads a file as UTF-8; throws an error with code ENOENT when it is missing. */
  readFile?: (path: string) => string;
}

export interface LoadedConfig {
  config: Config;
  /** The file that was (or would have been) read. */
  configPath: string;
  configFileFound: boolean;
  /** --help / --version were given: the config file was not read and config holds the defaults. */
  help: boolean;
  version: boolean;
}

export function loadConfig(options: LoadConfigOptions): LoadedConfig {
  const readFile = options.readFile ?? ((p: string) => readFileSync(p, 'utf8'));
  const flags = parseFlags(options.argv);
  const configPath = flags.config ?? DEFAULT_CONFIG_PATH;
  const config = defaultConfig();
  if (flags.help || flags.version) {
    config.log.format = systemdLogFormat(options.env) ?? config.log.format;
    return { config, configPath, configFileFound: false, help: flags.help, version: flags.version };
  }

  const text = readConfigText(configPath, flags.config !== undefined, readFile);
  const file = text === undefined ? undefined : applyFile(configPath, text, config);
  const given = file?.given ?? new Set<string>();
  const stateDirFromEnv = applyEnv(options.env, config, given);
  applyFlags(flags, config);
  const imageDirsGiven = given.has('imageDirectories') || flags.imageDirs !== undefined;
  checkDirectories(config, imageDirsGiven, (keyPath, why) => {
    // Blame the key where the value came from: a flag, the environment, or its line in the file.
    const [key, index] = keyPath;
    if (key === 'stateDir' && flags.stateDir !== undefined) return new ConfigError('command line', undefined, '--state-dir', why);
    if (key === 'stateDir' && stateDirFromEnv) return new ConfigError('environment', undefined, 'STATE_DIRECTORY', why);
    if (key === 'imageDirectories' && flags.imageDirs !== undefined) {
      return new ConfigError('command line', undefined, '--image-dir', `${flags.imageDirs[index as number]}: ${why}`);
    }
    return new ConfigError(file?.source ?? 'built-in default', file?.lineOf(keyPath), formatKeyPath(keyPath), why);
  });
  const budgetProblem = groupBudgetProblem(config.hostShutdown);
  if (budgetProblem !== undefined) {
    throw new ConfigError(file?.source ?? 'built-in default', file?.lineOf(['hostShutdown', 'groups']), 'hostShutdown.groups', budgetProblem);
  }
  // "auto" (or nothing said anywhere) picks the journal when systemd started us.
  if ((config.log.format as string) === 'auto' || (!given.has('log.format') && flags.logFormat === undefined)) {
    config.log.format = systemdLogFormat(options.env) ?? 'text';
  }
  return { config: deepFreeze(config), configPath, configFileFound: text !== undefined, help: false, version: false };
}

function readConfigText(file: string, explicit: boolean, readFile: (p: string) => string): string | undefined {
  try {
    return readFile(file);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    // The packaged default file may be absent: the built-in defaults apply. A named file must exist.
    if (code === 'ENOENT' && !explicit) return undefined;
    throw new ConfigError(file, undefined, '', `cannot read config file: ${code ?? (err as Error).message}`, { cause: err });
  }
}

interface AppliedFile {
  source: string;
  given: Set<string>;
  lineOf(keyPath: KeyPath): number;
}

// yaml's own default; stated because an alias bomb ("billion laughs") must stop here, named.
const MAX_YAML_ALIASES = 100;

function applyFile(file: string, text: string, config: Config): AppliedFile {
  const lineCounter = new LineCounter();
  const doc = parseDocument(text, { lineCounter, prettyErrors: false });
  const syntax = doc.errors[0];
  if (syntax) {
    // Errors found at end of input (an unclosed quote) point past the text: show its last line.
    const line = lineCounter.linePos(Math.max(0, Math.min(syntax.pos[0], text.trimEnd().length - 1))).line;
    const why = syntax.message.split('\n')[0]!;
    throw new ConfigError(file, line, '', `YAML syntax error: ${why}`, { cause: syntax });
  }
  let raw: unknown;
  try {
    raw = doc.toJS({ maxAliasCount: MAX_YAML_ALIASES });
  } catch (err) {
    throw new ConfigError(file, undefined, '', `YAML aliases expand too far (more than ${MAX_YAML_ALIASES}): refusing a possible alias bomb`, { cause: err });
  }
  const result = validate(CONFIG_FILE_SCHEMA, raw);
  if (!result.ok) {
    const { keyPath, why } = result.problem;
    throw new ConfigError(file, lineOf(doc, lineCounter, keyPath), formatKeyPath(keyPath), why);
  }
  const given = applyGiven(result.value, config as unknown as Record<string, unknown>);
  return { source: file, given, lineOf: (keyPath) => lineOf(doc, lineCounter, keyPath) };
}

/** Line of the deepest node on keyPath that exists: the key itself when present. */
function lineOf(doc: Document, lineCounter: LineCounter, keyPath: KeyPath): number {
  let node: unknown = doc.contents;
  let offset = (node as { range?: number[] } | null)?.range?.[0] ?? 0;
  for (const seg of keyPath) {
    if (isMap(node)) {
      const pair = node.items.find((p) => String((p.key as { value?: unknown } | null)?.value) === String(seg));
      if (!pair) break;
      offset = (pair.key as { range?: number[] }).range?.[0] ?? offset;
      node = pair.value;
    } else if (isSeq(node) && typeof seg === 'number' && node.items[seg]) {
      node = node.items[seg];
      offset = (node as { range?: number[] }).range?.[0] ?? offset;
    } else break;
  }
  return lineCounter.linePos(offset).line;
}

/** journald when started by systemd (it sets these for every service), plain text otherwise. */
function systemdLogFormat(env: NodeJS.ProcessEnv): 'journal' | undefined {
  return env.JOURNAL_STREAM || env.INVOCATION_ID ? 'journal' : undefined;
}

/** Whether STATE_DIRECTORY set the state dir. */
function applyEnv(env: NodeJS.ProcessEnv, config: Config, given: Set<string>): boolean {
  if (!given.has('stateDir') && env.STATE_DIRECTORY) {
    // systemd lists one path per StateDirectory= entry, colon-separated; ours is the first.
    const first = env.STATE_DIRECTORY.split(':')[0]!;
    const result = validate(absolutePath, first);
    if (!result.ok) throw new ConfigError('environment', undefined, 'STATE_DIRECTORY', result.problem.why);
    config.stateDir = result.value;
    return true;
  }
  return false;
}

/** The state and image dirs once every source has spoken (path-rules.ts says why). */
function checkDirectories(config: Config, imageDirsGiven: boolean, error: (keyPath: KeyPath, why: string) => ConfigError): void {
  const stateProblem = stateDirProblem(config.stateDir);
  if (stateProblem !== undefined) throw error(['stateDir'], stateProblem);
  for (const [i, dir] of config.imageDirectories.entries()) {
    const problem = imageDirProblem(dir, config.stateDir);
    if (problem === undefined) continue;
    // A built-in image dir is not at fault: the state dir that collides with it is.
    if (!imageDirsGiven) throw error(['stateDir'], `collides with the default image directory ${dir}, which ${problem}`);
    throw error(['imageDirectories', i], problem);
  }
}

/** The groups' budgets run one after another, so together they must fit in the whole bound. */
export function groupBudgetProblem(h: Config['hostShutdown']): string | undefined {
  const total = h.groups.reduce((sum, g) => sum + g.budgetSec, 0);
  if (total <= h.timeoutSec) return undefined;
  return `the group budgets add up to ${total}s, more than hostShutdown.timeoutSec (${h.timeoutSec}s), the bound they share`;
}

function applyFlags(flags: Flags, config: Config): void {
  const set = <S extends v.GenericSchema>(flag: string, value: unknown, schema: S, assign: (value: v.InferOutput<S>) => void) => {
    if (value === undefined) return;
    const result = validate(schema, value);
    if (!result.ok) throw new ConfigError('command line', undefined, flag, result.problem.why);
    assign(result.value);
  };
  const f = CONFIG_FIELDS;
  set('--bus', flags.bus, f.bus, (value) => (config.bus = value));
  set('--libvirt-uri', flags.libvirtUri, f.libvirt.uri, (value) => (config.libvirt.uri = value));
  set('--state-dir', flags.stateDir, f.stateDir, (value) => (config.stateDir = value));
  set('--image-dir', flags.imageDirs, f.imageDirectories, (value) => (config.imageDirectories = value));
  set('--log-level', flags.logLevel, f.log.level, (value) => (config.log.level = value));
  // "auto" is resolved once every source has spoken (loadConfig).
  set('--log-format', flags.logFormat, f.log.format, (value) => (config.log.format = value as Config['log']['format']));
}

function deepFreeze<T>(value: T): T {
  if (typeof value === 'object' && value !== null) {
    for (const v of Object.values(value)) deepFreeze(v);
    Object.freeze(value);
  }
  return value;
}
