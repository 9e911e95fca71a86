import { openJournalSocket, type DatagramSender } from './journal-socket.js';
import { fdIdentity, wantsNativeJournal, type JournalTransport } from './transport-choice.js';

/**
 * The journal sender main.ts hands the logger, when log.journalTransport asks for one and the
 * socket works; why not otherwise, for the first log line (the stream lines then go on as before).
 */
export function nativeJournal(transport: JournalTransport, env: NodeJS.ProcessEnv): { journal?: DatagramSender; notUsed?: string } {
  if (!wantsNativeJournal({ transport, env, stderrIdentity: fdIdentity(2) })) return {};
  const opened = openJournalSocket();
  return typeof opened === 'string' ? { notUsed: opened } : { journal: opened };
}
