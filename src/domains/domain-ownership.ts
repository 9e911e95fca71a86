import type { DomainIdentity, Hypervisor } from '../hypervisor/port.js';
import type { MachineRecord } from '../machine/record.js';

/** ours: our mark and the record's UUID; foreign: someone else's domain under our name; missing: gone. */
export type Ownership = { kind: 'ours' } | { kind: 'foreign'; reason: string } | { kind: 'missing' };

/**
 * Tells our domains from others that carry our name (defined by hand, or left by another host
 * tool). A domain's identity is read once per process and cached until the domain vanishes, so the
 * check costs one call per domain however often the loops act on it.
 */
export class DomainOwnership {
  private readonly identities = new Map<string, DomainIdentity>();

  constructor(private readonly hypervisor: Hypervisor) {}

  /** Whether the agent may act on this domain for this record: false for foreign and missing domains. */
  async isOurs(domainName: string, record: Pick<MachineRecord, 'uuid'>): Promise<boolean> {
    return (await this.check(domainName, record)).kind === 'ours';
  }

  async check(domainName: string, record: Pick<MachineRecord, 'uuid'>): Promise<Ownership> {
    const identity = await this.identityOf(domainName);
    if (!identity) return { kind: 'missing' };
    if (identity.machineName === undefined) return { kind: 'foreign', reason: `domain ${domainName} does not carry the vmkeeper mark` };
    if (identity.uuid.toLowerCase() !== record.uuid.toLowerCase()) {
      return { kind: 'foreign', reason: `domain ${domainName} has UUID ${identity.uuid}, the machine record ${record.uuid}` };
    }
    return { kind: 'ours' };
  }

  /** Whether the domain carries our mark, whatever record it belongs to (orphan reports). */
  async isMarked(domainName: string): Promise<boolean> {
    return (await this.identityOf(domainName))?.machineName !== undefined;
  }

  /** The agent itself just defined this domain from a record: no need to read it back. */
  defined(domainName: string, uuid: string, machineName: string): void {
    this.identities.set(domainName, { uuid, machineName });
  }

  /** The domain vanished: a domain defined later under the same name is checked afresh. */
  forget(domainName: string): void {
    this.identities.delete(domainName);
  }

  private async identityOf(domainName: string): Promise<DomainIdentity | undefined> {
    const cached = this.identities.get(domainName);
    if (cached) return cached;
    const identity = await this.hypervisor.domainIdentity(domainName);
    if (identity) this.identities.set(domainName, identity);
    return identity;
  }
}
