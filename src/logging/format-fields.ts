import type { LogFields } from './logger.js';

// Rendering of structured fields, shared by the text and journal formats.

/** One value as it appears after "key=": bare when safe, JSON-quoted when it has spaces or quotes. */
export function formatValue(value: unknown): string {
  let text: string;
  if (value instanceof Error) text = value.message.split('\n')[0]!;
  else if (typeof value === 'string') text = value;
  else if (typeof value === 'bigint' || typeof value === 'number' || typeof value === 'boolean') text = String(value);
  else if (value === undefined || value === null) text = String(value);
  else text = toJson(value);
  return text === '' || /[\s"=\\]|[\u0000-\u001f]/.test(text) ? JSON.stringify(text) : text;
}

export function formatFields(fields: LogFields | undefined): string {
  if (!fields) return '';
  let out = '';
  for (const [key, value] of Object.entries(fields)) if (value !== undefined) out += ` ${key}=${formatValue(value)}`;
  return out;
}

/** JSON that survives what components log: BigInt from D-Bus, Errors, cycles. */
export function toJson(value: unknown): string {
  const seen = new WeakSet<object>();
  try {
    return JSON.stringify(value, (_key, v: unknown) => {
      if (typeof v === 'bigint') return v.toString();
      if (v instanceof Error) return { name: v.name, message: v.message };
      if (typeof v === 'object' && v !== null) {
        if (seen.has(v)) return '[circular]';
        seen.add(v);
      }
      return v;
    });
  } catch {
    return JSON.stringify(String(value));
  }
}
