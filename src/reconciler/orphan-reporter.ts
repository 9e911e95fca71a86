import { machineNameFromDomain } from '../machine/names.js';
import type { DomainSnapshot } from '../domains/domain-observer.js';

export interface OrphanReporterOptions {
  hasRecord: (domainName: string) => boolean;
  isMarked: (domainName: string) => Promise<boolean>;
  /** machine: the machine name the domain's name stands for, when it is a valid one. */
  report: (domainName: string, machine: string | undefined) => void;
}

/**
 * Reports each domain that carries our prefix and mark but has no record, once each time it
 * appears: a name that vanishes or gets a record is forgotten, so a later orphan under the same
 * name is reported again.
 */
export class OrphanReporter {
  private readonly seen = new Set<string>();

  constructor(private readonly o: OrphanReporterOptions) {}

  async review(snapshot: DomainSnapshot): Promise<void> {
    for (const domainName of this.seen) {
      if (!snapshot.has(domainName) || this.o.hasRecord(domainName)) this.seen.delete(domainName);
    }
    for (const domainName of snapshot.keys()) {
      if (this.seen.has(domainName) || this.o.hasRecord(domainName)) continue;
      this.seen.add(domainName);
      let marked: boolean;
      try {
        marked = await this.o.isMarked(domainName);
      } catch {
        this.seen.delete(domainName); // could not read it: look again on the next snapshot
        continue;
      }
      if (marked) this.o.report(domainName, machineNameFromDomain(domainName));
    }
  }
}
