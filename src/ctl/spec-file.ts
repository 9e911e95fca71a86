import { LineCounter, parseDocument, type Document } from 'yaml';
import { CtlError, ExitCode, firstLine } from './errors.js';

// A machine spec from a file or stdin, JSON or YAML (YAML 1.2 reads JSON too), turned into the JSON
// text CreateMachine wants. Keeps the parsed document so a field the agent rejects can be located.

export interface SpecSource {
  /** The spec as JSON text. */
  json: string;
  /** "spec.yaml:5" for a field path such as disks[0].sizeGiB, or undefined. */
  locate(field: string): string | undefined;
}

export function parseSpecText(text: string, label: string): SpecSource {
  const lineCounter = new LineCounter();
  const doc = parseDocument(text, { lineCounter, prettyErrors: true, uniqueKeys: true });
  if (doc.errors.length > 0) {
    const err = doc.errors[0]!;
    const at = err.linePos?.[0];
    throw new CtlError(`${label}${at ? `:${at.line}:${at.col}` : ''}: not valid JSON or YAML: ${firstLine(err.message).replace(/ at line \d+, column \d+:?$/, '')}`, ExitCode.InvalidInput);
  }
  const value: unknown = doc.toJS();
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new CtlError(`${label}: the spec must be a JSON object (YAML mapping)`, ExitCode.InvalidInput);
  }
  return {
    json: JSON.stringify(value),
    locate: (field) => locate(doc, lineCounter, label, field),
  };
}

/** "disks[0].sizeGiB" -> ["disks", 0, "sizeGiB"]. */
export function fieldPath(field: string): Array<string | number> {
  const out: Array<string | number> = [];
  for (const part of field.split('.')) {
    const m = /^([^[\]]*)((?:\[\d+\])*)$/.exec(part);
    if (!m) return out;
    if (m[1]) out.push(m[1]);
    for (const idx of m[2]!.matchAll(/\[(\d+)\]/g)) out.push(Number(idx[1]));
  }
  return out;
}

function locate(doc: Document, lines: LineCounter, label: string, field: string): string | undefined {
  // A missing field ("boot.kernel is required") is reported at the nearest parent that exists.
  for (let path = fieldPath(field); path.length > 0; path = path.slice(0, -1)) {
    const node = doc.getIn(path, true) as { range?: [number, number, number] } | undefined;
    if (node && typeof node === 'object' && node.range) return `${label}:${lines.linePos(node.range[0]).line}`;
  }
  return undefined;
}

/** The field an InvalidSpec message names: `spec field "disks[0].sizeGiB": ...`. */
export function invalidField(message: string): string | undefined {
  return /spec field "([^"]+)"/.exec(message)?.[1];
}
