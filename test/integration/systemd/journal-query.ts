import type { AgentContainer } from './container.js';

/** One journal entry's fields as `journalctl -o json` gives them (text fields only). */
export type JournalEntry = Record<string, string | undefined>;

/** The entries journalctl inside the container matches, oldest first. */
export async function journalEntries(a: AgentContainer, matches: string[]): Promise<JournalEntry[]> {
  const r = await a.c.exec(['journalctl', '--no-pager', '-o', 'json', ...matches], { timeoutMs: 20_000 });
  // journalctl exits 1 with "-- No entries --" on some versions when nothing matches.
  if (r.code !== 0 && r.stdout.trim() !== '') throw new Error(`journalctl ${matches.join(' ')}: ${r.stderr}`);
  return r.stdout
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => JSON.parse(line) as JournalEntry);
}
