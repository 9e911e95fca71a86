import type { DomainSnapshot } from '../../../src/domains/domain-observer.js';
import { domainNameFor } from '../../../src/machine/names.js';

// What the two observer suites (polling, events) share: the intervals and the domains they watch.

export const POLL_MS = 1000;
export const FULL_MS = 30_000;
export const a = domainNameFor('a');
export const b = domainNameFor('b');
export const c = domainNameFor('c');

/** A snapshot as a listener saw it, with the changed names sorted. */
export type SeenSnapshot = { snapshot: DomainSnapshot; changed: string[] };
