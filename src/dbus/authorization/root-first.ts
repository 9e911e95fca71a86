import type { Logger } from '../../logging/logger.js';
import type { AuthorizationQuery } from './polkit-authority.js';
import type { CallerAuthorizer } from './caller-authorizer.js';

// Root is answered here, before polkit is asked, as systemd answers uid 0 itself. A host whose
// polkitd runs without our .policy installed (a partial install, a container image) would otherwise
// refuse root too, leaving nobody able to manage the machines; and root could grant itself any
// rule anyway. The uid comes from the bus daemon (GetConnectionUnixUser), never from the message.

const ROOT_UID = 0;

export function rootFirst(inner: CallerAuthorizer, uidOf: (sender: string) => Promise<number | undefined>, logger: Logger): CallerAuthorizer {
  return {
    async authorize(query: AuthorizationQuery): Promise<void> {
      if ((await uidOf(query.sender)) === ROOT_UID) {
        logger.debug('call by root allowed without asking polkit', { sender: query.sender, action: query.action });
        return;
      }
      return inner.authorize(query);
    },
  };
}
