import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { EVENT_MESSAGE_IDS, eventMessageId } from '../../../../src/logging/journal/message-ids.js';

const SRC = path.resolve(import.meta.dirname, '../../../../src');
const DOCS = path.resolve(import.meta.dirname, '../../../../docs/operations.md');

/** Every reason recorded in src/: `.event(name, 'normal' | 'warning', 'Reason', ...)` or `{ type: 'normal', reason: 'Reason', ... }`. */
function recordedReasons(): Set<string> {
  const reasons = new Set<string>();
  const walk = (dir: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const file = path.join(dir, entry.name);
      if (entry.isDirectory()) walk(file);
      else if (file.endsWith('.ts')) {
        for (const m of readFileSync(file, 'utf8').matchAll(/'(?:normal|warning)',\s*(?:reason:\s*)?'([A-Z][A-Za-z]+)'/g)) reasons.add(m[1]!);
      }
    }
  };
  walk(SRC);
  return reasons;
}

describe('event MESSAGE_IDs', () => {
  it('every reason the agent records has an id, and the table has no stale entry', () => {
    const reasons = recordedReasons();
    expect(reasons.size).toBeGreaterThan(10);
    expect([...reasons].sort()).toEqual(Object.keys(EVENT_MESSAGE_IDS).sort());
  });

  it('ids are distinct 128-bit lower-case hex, as journalctl MESSAGE_ID= expects', () => {
    const ids = Object.values(EVENT_MESSAGE_IDS);
    for (const id of ids) expect(id).toMatch(/^[0-9a-f]{32}$/);
    expect(new Set(ids).size).toBe(ids.length);
  });

  it('docs/operations.md lists every reason with its id', () => {
    const docs = readFileSync(DOCS, 'utf8');
    for (const [reason, id] of Object.entries(EVENT_MESSAGE_IDS)) expect(docs, reason).toMatch(new RegExp(`\\| \`${reason}\` \\| \`${id}\` \\|`));
  });

  it('looks up only real entries', () => {
    expect(eventMessageId('Created')).toBe(EVENT_MESSAGE_IDS.Created);
    expect(eventMessageId('toString')).toBeUndefined();
    expect(eventMessageId(undefined)).toBeUndefined();
  });
});
