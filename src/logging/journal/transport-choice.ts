import { fstatSync } from 'node:fs';

// Whether entries go to journald as native datagrams (structured fields) or as stream lines.
// "auto" follows sd_journal_stream_fd(3)'s advice: upgrade only when stderr really is the
// journal stream systemd gave us (JOURNAL_STREAM=dev:ino), never when an operator redirected it.

export type JournalTransport = 'auto' | 'native' | 'stream';

export interface TransportChoiceInput {
  transport: JournalTransport;
  env: NodeJS.ProcessEnv;
  /** dev:ino of stderr, or undefined when it cannot be stat'ed. */
  stderrIdentity: string | undefined;
}

export function wantsNativeJournal({ transport, env, stderrIdentity }: TransportChoiceInput): boolean {
  if (transport === 'stream') return false;
  if (transport === 'native') return true;
  return env.JOURNAL_STREAM !== undefined && env.JOURNAL_STREAM === stderrIdentity;
}

/** "dev:ino" of a file descriptor, in the form systemd writes JOURNAL_STREAM. */
export function fdIdentity(fd: number): string | undefined {
  try {
    const st = fstatSync(fd);
    return `${st.dev}:${st.ino}`;
  } catch {
    return undefined;
  }
}
