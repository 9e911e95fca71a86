// Plain-text tables that fit a width: the widest column gives up characters first ("…" marks a cut).

export interface Cell {
  text: string;
  /** Applied after padding so escape codes never count towards the width. */
  style?: (s: string) => string;
}

export type CellInput = string | Cell;

export interface TableOptions {
  /** Total width to fit; undefined = no limit (output is not a terminal). */
  maxWidth?: number;
  /** Spaces between columns. */
  gap?: number;
  /** A column is never cut below this many characters. */
  minColumn?: number;
}

const ELLIPSIS = '…';

export function textWidth(s: string): number {
  return Array.from(s).length;
}

export function truncate(s: string, width: number): string {
  const chars = Array.from(s);
  if (chars.length <= width) return s;
  if (width <= 0) return '';
  return chars.slice(0, width - 1).join('') + ELLIPSIS;
}

/** Column widths after shrinking the widest ones until the row fits maxWidth (or nothing can shrink). */
export function fitWidths(natural: number[], maxWidth: number | undefined, gap: number, minColumn: number): number[] {
  const widths = [...natural];
  if (maxWidth === undefined || widths.length === 0) return widths;
  const total = () => widths.reduce((a, b) => a + b, 0) + gap * (widths.length - 1);
  while (total() > maxWidth) {
    let widest = -1;
    for (let i = 0; i < widths.length; i++) {
      if (widths[i]! > minColumn && (widest < 0 || widths[i]! > widths[widest]!)) widest = i;
    }
    if (widest < 0) break;
    widths[widest]!--;
  }
  return widths;
}

export function formatTable(headers: string[], rows: CellInput[][], options: TableOptions = {}): string {
  let gap = options.gap ?? 3;
  const minColumn = options.minColumn ?? 4;
  const cells: Cell[][] = [headers.map((h) => ({ text: h })), ...rows.map((r) => r.map((c) => (typeof c === 'string' ? { text: c } : c)))];
  const natural = headers.map((_, i) => Math.max(...cells.map((r) => textWidth(oneLine(r[i]?.text ?? '')))));
  let widths = fitWidths(natural, options.maxWidth, gap, minColumn);
  if (options.maxWidth !== undefined && sum(widths) + gap * (widths.length - 1) > options.maxWidth) {
    // Very narrow: one space between columns before giving up.
    gap = 1;
    widths = fitWidths(natural, options.maxWidth, gap, minColumn);
  }
  const lines = cells.map((row) =>
    widths
      .map((w, i) => {
        const cell = row[i] ?? { text: '' };
        const text = truncate(oneLine(cell.text), w);
        const padded = i === widths.length - 1 ? text : text + ' '.repeat(w - textWidth(text));
        return cell.style ? cell.style(padded) : padded;
      })
      .join(' '.repeat(gap))
      .trimEnd(),
  );
  return lines.join('\n') + '\n';
}

function oneLine(s: string): string {
  return s.replace(/[\r\n\t]+/g, ' ');
}

function sum(values: number[]): number {
  return values.reduce((a, b) => a + b, 0);
}
