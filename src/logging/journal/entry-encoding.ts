// The native journal protocol's datagram: one FIELD=value line per field, or, for a value that
// holds a newline, FIELD\n + its length as 64-bit little-endian + the bytes + \n.

export type JournalFields = ReadonlyArray<readonly [name: string, value: string]>;

const MAX_FIELD_NAME = 64;

/**
 * A name journald accepts: upper-case letters, digits and "_", not starting with "_" (those are
 * the journal's trusted fields) nor a digit, at most 64 characters. camelCase becomes CAMEL_CASE.
 * Undefined when nothing usable is left.
 */
export function journalFieldName(raw: string): string | undefined {
  const name = raw
    .replace(/([a-z0-9])([A-Z])/g, '$1_$2')
    .toUpperCase()
    .replace(/[^A-Z0-9_]/g, '_')
    .replace(/^[_0-9]+/, '')
    .slice(0, MAX_FIELD_NAME);
  return name === '' ? undefined : name;
}

/** One datagram for journald; names must already be valid (journalFieldName). */
export function encodeJournalEntry(fields: JournalFields): Buffer {
  // Text runs are joined first: one Buffer per entry in the common case of no multi-line value.
  const parts: Buffer[] = [];
  let text = '';
  for (const [name, value] of fields) {
    if (!value.includes('\n')) {
      text += `${name}=${value}\n`;
      continue;
    }
    const bytes = Buffer.from(value, 'utf8');
    const length = Buffer.alloc(8);
    length.writeBigUInt64LE(BigInt(bytes.length));
    parts.push(Buffer.from(`${text}${name}\n`, 'utf8'), length, bytes);
    text = '\n';
  }
  if (parts.length === 0) return Buffer.from(text, 'utf8');
  parts.push(Buffer.from(text, 'utf8'));
  return Buffer.concat(parts);
}
