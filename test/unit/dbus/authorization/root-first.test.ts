import { describe, expect, it } from 'vitest';
import { ACTION_DELETE } from '../../../../src/dbus/authorization/actions.js';
import type { CallerAuthorizer } from '../../../../src/dbus/authorization/caller-authorizer.js';
import { rootFirst } from '../../../../src/dbus/authorization/root-first.js';
import type { AuthorizationQuery } from '../../../../src/dbus/authorization/polkit-authority.js';
import { AgentError } from '../../../../src/machine/errors.js';
import type { Logger } from '../../../../src/logging/logger.js';

const quiet: Logger = { error: () => {}, warn: () => {}, info: () => {}, debug: () => {} };

/** An authorizer that refuses everyone, as polkitd does when our .policy is not installed. */
function refusingAll(): CallerAuthorizer & { asked: AuthorizationQuery[] } {
  const asked: AuthorizationQuery[] = [];
  return {
    asked,
    async authorize(q) {
      asked.push(q);
      throw new AgentError('AccessDenied', `not authorized for ${q.action}`);
    },
  };
}

const query = (sender: string): AuthorizationQuery => ({ sender, action: ACTION_DELETE, allowInteraction: false });

describe('rootFirst', () => {
  it('allows uid 0 without asking the inner authorizer', async () => {
    const inner = refusingAll();
    const uids = new Map([[':1.5', 0]]);
    await expect(rootFirst(inner, async (s) => uids.get(s), quiet).authorize(query(':1.5'))).resolves.toBeUndefined();
    expect(inner.asked).toEqual([]);
  });

  it('asks the inner authorizer for any other uid, and for a caller the bus cannot name', async () => {
    const inner = refusingAll();
    const uids = new Map<string, number | undefined>([[':1.6', 1000], [':1.7', undefined]]);
    const authorizer = rootFirst(inner, async (s) => uids.get(s), quiet);
    await expect(authorizer.authorize(query(':1.6'))).rejects.toMatchObject({ kind: 'AccessDenied' });
    await expect(authorizer.authorize(query(':1.7'))).rejects.toMatchObject({ kind: 'AccessDenied' });
    expect(inner.asked.map((q) => q.sender)).toEqual([':1.6', ':1.7']);
  });
});
