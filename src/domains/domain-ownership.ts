import type { Hypervisor } from '../hypervisor/port.js';
import type { MachineRecord } from '../machine/record.js';

/** ours: our mark and the record's UUID; foreign: someone else's domain under our name; missing: gone. */
export type Ownership = { kind: 'ours' } | { kind: 'foreign'; reason: string } | { kind: 'missing' };

interface DomainFacts {
  marked: boolean;
  uuid: string | undefined;
}

/**
 * Tells our domains from others that carry our name (defined by hand, or left by another host
 * tool). A domain's XML is read once per process and cached until the domain vanishes, so the
 * check costs one call per domain however often the loops act on it.
 */
export class DomainOwnership {
  private readonly facts = new Map<string, DomainFacts>();

  constructor(
    private readonly hypervisor: Hypervisor,
    /** Whether the XML carries the agent's metadata mark (DomainProvisioner.isOurs). */
    private readonly hasOurMark: (xml: string) => boolean,
  ) {}

  /** Whether the agent may act on this domain for this record: false for foreign and missing domains. */
  async isOurs(domainName: string, record: Pick<MachineRecord, 'uuid'>): Promise<boolean> {
    return (await this.check(domainName, record)).kind === 'ours';
  }

  async check(domainName: string, record: Pick<MachineRecord, 'uuid'>): Promise<Ownership> {
    const facts = await this.factsOf(domainName);
    if (!facts) return { kind: 'missing' };
    if (!facts.marked) return { kind: 'foreign', reason: `domain ${domainName} does not carry the vmkeeper mark` };
    if (facts.uuid !== undefined && facts.uuid.toLowerCase() !== record.uuid.toLowerCase()) {
      return { kind: 'foreign', reason: `domain ${domainName} has UUID ${facts.uuid}, the machine record ${record.uuid}` };
    }
    return { kind: 'ours' };
  }

  /** Whether the domain carries our mark, whatever record it belongs to (orphan reports). */
  async isMarked(domainName: string): Promise<boolean> {
    return (await this.factsOf(domainName))?.marked ?? false;
  }

  /** The agent itself just defined this domain from a record: no need to read it back. */
  defined(domainName: string, uuid: string): void {
    this.facts.set(domainName, { marked: true, uuid });
  }

  /** The domain vanished: a domain defined later under the same name is checked afresh. */
  forget(domainName: string): void {
    this.facts.delete(domainName);
  }

  private async factsOf(domainName: string): Promise<DomainFacts | undefined> {
    const cached = this.facts.get(domainName);
    if (cached) return cached;
    const xml = await this.hypervisor.domainXml(domainName);
    if (xml === undefined) return undefined;
    const facts = { marked: this.hasOurMark(xml), uuid: domainUuid(xml) };
    this.facts.set(domainName, facts);
    return facts;
  }
}

/** The domain's own <uuid> (libvirt writes it right after <name>, before any device's). */
function domainUuid(xml: string): string | undefined {
  return /<uuid>\s*([0-9A-Fa-f-]+)\s*<\/uuid>/.exec(xml)?.[1];
}
