// Durations and times for people: "45s", "3m12s", "2h5m", "4d3h"; timestamps in UTC, RFC 3339.

export function formatDuration(ms: number): string {
  const total = Math.max(0, Math.floor(ms / 1000));
  const d = Math.floor(total / 86_400);
  const h = Math.floor((total % 86_400) / 3600);
  const m = Math.floor((total % 3600) / 60);
  const s = total % 60;
  if (d > 0) return h > 0 ? `${d}d${h}h` : `${d}d`;
  if (h > 0) return m > 0 ? `${h}h${m}m` : `${h}h`;
  if (m > 0) return s > 0 && m < 10 ? `${m}m${s}s` : `${m}m`;
  return `${s}s`;
}

/** Age since `sinceMs`, or "-" when the time is not set. */
export function formatAge(sinceMs: number, nowMs: number): string {
  return sinceMs > 0 ? formatDuration(nowMs - sinceMs) : '-';
}

/** "in 23s", "now", "overdue 4s", or "" when no deadline is set. */
export function formatCountdown(atMs: number, nowMs: number): string {
  if (atMs <= 0) return '';
  if (atMs > nowMs) return `in ${formatDuration(Math.ceil((atMs - nowMs) / 1000) * 1000)}`;
  if (nowMs - atMs < 1000) return 'now';
  return `overdue ${formatDuration(nowMs - atMs)}`;
}

export function formatTimestamp(ms: number): string {
  if (ms <= 0) return '-';
  return new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z');
}
