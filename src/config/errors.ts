// Every configuration problem is one ConfigError whose message says where: file:line: key: why.
// main.ts prints the message as is and exits non-zero, so it must stand alone on one line.

export class ConfigError extends Error {
  /** Where the bad value came from: a file path, "command line" or "environment". */
  readonly source: string;
  /** 1-based line in the file, when known. */
  readonly line: number | undefined;
  /** Dotted key path, e.g. "machines.sweepIntervalSec"; empty for whole-file problems. */
  readonly key: string;

  constructor(source: string, line: number | undefined, key: string, why: string, options?: { cause?: unknown }) {
    const where = line === undefined ? source : `${source}:${line}`;
    super(key ? `${where}: ${key}: ${why}` : `${where}: ${why}`, options);
    this.name = 'ConfigError';
    this.source = source;
    this.line = line;
    this.key = key;
  }
}

