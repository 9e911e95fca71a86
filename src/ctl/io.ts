import { readFile } from 'node:fs/promises';
import { styles, useColor, type Styles } from './format/style.js';

// The CLI's streams and terminal facts, passed into every command so tests capture them.

export interface Io {
  out(text: string): void;
  err(text: string): void;
  /** stdout is a terminal: progress may redraw a status line. */
  isTTY: boolean;
  /** Width to fit tables into; undefined when not a terminal (no cutting for pipes). */
  columns?: number;
  styles: Styles;
  readStdin(): Promise<string>;
  readFile(path: string): Promise<string>;
}

export function processIo(env: NodeJS.ProcessEnv = process.env): Io {
  const isTTY = process.stdout.isTTY === true;
  const fromEnv = Number(env.COLUMNS);
  const columns = isTTY ? process.stdout.columns || (fromEnv > 0 ? fromEnv : 80) : fromEnv > 0 ? fromEnv : undefined;
  return {
    out: (text) => void process.stdout.write(text),
    err: (text) => void process.stderr.write(text),
    isTTY,
    columns,
    styles: styles(useColor(isTTY, env)),
    readStdin: async () => {
      const chunks: Buffer[] = [];
      for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
      return Buffer.concat(chunks).toString('utf8');
    },
    readFile: (path) => readFile(path, 'utf8'),
  };
}

/** An Io that records everything, for tests and for commands that need a buffer. */
export interface CapturedIo extends Io {
  stdout: string;
  stderr: string;
}

export function captureIo(o: { isTTY?: boolean; columns?: number; color?: boolean; stdin?: string; files?: Record<string, string> } = {}): CapturedIo {
  const io: CapturedIo = {
    stdout: '',
    stderr: '',
    out: (text) => void (io.stdout += text),
    err: (text) => void (io.stderr += text),
    isTTY: o.isTTY ?? false,
    columns: o.columns,
    styles: styles(o.color ?? false),
    readStdin: async () => o.stdin ?? '',
    readFile: async (path) => {
      const text = o.files?.[path];
      if (text === undefined) throw Object.assign(new Error(`ENOENT: no such file or directory, open '${path}'`), { code: 'ENOENT' });
      return text;
    },
  };
  return io;
}
