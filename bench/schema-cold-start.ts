// The child of bench/schema-startup.bench.ts: one cold import of valibot and one build of our
// spec schema in a fresh process, printed as JSON. No static imports, so nothing is loaded early.
const t0 = performance.now();
await import('valibot');
const t1 = performance.now();
// Our own modules (transpiled by tsx here, not in the package) are timed apart, not counted.
const { machineSpecSchema } = await import('../src/machine/spec-schema.js');
const { DEFAULT_SPEC_LIMITS } = await import('../src/machine/spec.js');
const t2 = performance.now();
machineSpecSchema(DEFAULT_SPEC_LIMITS);
const t3 = performance.now();
process.stdout.write(JSON.stringify({ importMs: t1 - t0, ownModulesMs: t2 - t1, buildMs: t3 - t2 }));
