// Shared helpers for the benchmarks: percentiles and a plain report line (waiting: test/support/wait.ts).

export function percentile(values: number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const idx = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[idx]!;
}

export function summary(label: string, values: number[], unit = 'ms'): string {
  const f = (n: number) => (Number.isInteger(n) ? String(n) : n.toFixed(2));
  return `${label}: n=${values.length} p50=${f(percentile(values, 50))}${unit} p99=${f(percentile(values, 99))}${unit} max=${f(Math.max(...values))}${unit}`;
}
