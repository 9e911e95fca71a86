import { describe, expect, it } from 'vitest';
import { wantsNativeJournal } from '../../../../src/logging/journal/transport-choice.js';

describe('wantsNativeJournal', () => {
  it.each([
    { transport: 'auto', env: { JOURNAL_STREAM: '8:1234' }, stderr: '8:1234', native: true },
    { transport: 'auto', env: { JOURNAL_STREAM: '8:1234' }, stderr: '8:999', native: false },
    { transport: 'auto', env: { JOURNAL_STREAM: '8:1234' }, stderr: undefined, native: false },
    { transport: 'auto', env: {}, stderr: '8:1234', native: false },
    { transport: 'native', env: {}, stderr: undefined, native: true },
    { transport: 'stream', env: { JOURNAL_STREAM: '8:1234' }, stderr: '8:1234', native: false },
  ] as const)('$transport, JOURNAL_STREAM=$env.JOURNAL_STREAM, stderr $stderr -> native $native', ({ transport, env, stderr, native }) => {
    expect(wantsNativeJournal({ transport, env, stderrIdentity: stderr })).toBe(native);
  });
});
