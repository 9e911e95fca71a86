import { expect, it } from 'vitest';
import { measureLoad } from '../../../bench/store-load.bench.js';

// Start-up must not stall on a big host: 10,000 records well under a second (3 s = wide margin).
it('loads 10,000 records in under 3000 ms', async () => {
  const { ms, loaded } = await measureLoad(10_000);
  console.log(`store load: ${loaded} records in ${Math.round(ms)} ms`);
  expect(loaded).toBe(10_000);
  expect(ms).toBeLessThan(3000);
});
