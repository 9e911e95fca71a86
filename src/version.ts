import { createRequire } from 'node:module';

// The one version: package.json's, which the packages also take theirs from. Both src/ (run from
// source) and dist/ (built) sit one level below it.
export const VERSION: string = (createRequire(import.meta.url)('../package.json') as { version: string }).version;
