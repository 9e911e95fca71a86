// The hypervisor as the rest of the agent sees it. Two implementations: libvirt/ (the real one)
// and the fake in test/support/fakes/ (unit tests). Every method is idempotent where the contract
// says so: "not found" on destroy/undefine counts as done, so the sweeper can repeat any step.

export type DomainRunState = 'running' | 'paused' | 'shutoff' | 'crashed' | 'other';

/** Whether a qemu process still exists for the domain (paused and shutting-down count). */
export const isDomainActive = (s: DomainRunState | undefined): boolean => s !== undefined && s !== 'shutoff' && s !== 'crashed';

export interface DomainSummary {
  /** Libvirt domain name. */
  name: string;
  /** Not every listing reports it (the libvirt adapter's cheap one does not). */
  uuid?: string;
  state: DomainRunState;
}

/**
 * A domain as the agent wants it, in the core's terms; the adapter turns it into its own format
 * (libvirt: domain XML with the vmkeeper mark) and nothing of that format leaks back out.
 */
export interface DomainDescription {
  domainName: string;
  uuid: string;
  /** The machine the domain belongs to: the adapter marks the domain with it. */
  machineName: string;
  domainType: 'kvm' | 'qemu';
  cpus: number;
  memoryMiB: number;
  /** Direct kernel boot; without it the guest boots from its first disk. */
  boot?: { kernel: string; initrd?: string; cmdline?: string };
  /** qcow2 files in guest order (the first is the boot disk). */
  diskFiles: string[];
  nics: DomainNic[];
  /** Where the serial console is written. */
  serialLogFile: string;
  /** Milliseconds since the epoch, from the machine record. */
  createdAt: number;
}

export type DomainNic = { network: string } | { bridge: string };

/** Who a domain says it belongs to. machineName undefined: it carries no vmkeeper mark. */
export interface DomainIdentity {
  uuid: string;
  machineName: string | undefined;
}

export interface Hypervisor {
  readonly uri: string;
  /** Opens the connection; safe to call again after a failure (it reconnects). */
  connect(): Promise<void>;
  close(): Promise<void>;
  isConnected(): boolean;
  /** All domains whose names carry the agent's prefix, with their states: the full listing. */
  listDomains(): Promise<DomainSummary[]>;
  /**
   * Names of the active (running or paused) domains carrying the prefix: the listing polled every
   * tick, whose cost follows the running domains, not the defined ones. Throws when libvirt is gone.
   */
  listActiveDomainNames(): Promise<string[]>;
  /**
   * Follows the lifecycle events of the domains carrying the prefix, so that a change is seen
   * without polling. Rejects when the hypervisor cannot deliver them (the caller polls instead).
   */
  watchDomainEvents(listener: DomainEventListener): Promise<DomainEventWatch>;
  /** Defines (or redefines) a persistent domain; returns its UUID. */
  defineDomain(description: DomainDescription): Promise<string>;
  /** Starts a defined domain; a running domain counts as started. */
  startDomain(name: string): Promise<void>;
  /** Asks the guest to shut down (ACPI power button). Not found or shut off counts as done. */
  shutdownDomain(name: string): Promise<void>;
  /** Stops the domain at once (SIGTERM, then SIGKILL on qemu). Not found or shut off counts as done. */
  destroyDomain(name: string): Promise<void>;
  /** Removes the definition. Not found counts as done. */
  undefineDomain(name: string): Promise<void>;
  /**
   * Saves a running guest's memory to file and stops the domain, which stays defined (libvirt's
   * virDomainSave). Bounded by timeoutMs rather than the usual call timeout: a large guest takes
   * long. libvirt marks a file finished only at the end, so a cut-off save is never restored.
   */
  saveDomain(name: string, file: string, timeoutMs: number): Promise<void>;
  /** Starts a defined domain from a file saveDomain wrote: the guest resumes where it was. */
  restoreDomain(file: string, timeoutMs: number): Promise<void>;
  /** One domain's state, fresh from libvirt; undefined when not found. */
  domainState(name: string): Promise<DomainRunState | undefined>;
  /** The live definition's UUID and vmkeeper mark, for adoption checks (is this domain ours?). Undefined when not found. */
  domainIdentity(name: string): Promise<DomainIdentity | undefined>;
}

export interface DomainEventListener {
  /** The domain was defined, undefined, started, stopped, paused, resumed, crashed... */
  onDomainEvent(domainName: string): void;
  /** No more events will come (the connection to libvirtd closed); reason says why. */
  onEventsLost(reason: string): void;
}

/**
 * watchDomainEvents rejects with this when events cannot be had at all here (a URI or driver
 * without them, no events addon): asking again soon is pointless. Any other rejection (libvirtd
 * unreachable) may pass.
 */
export class DomainEventsUnsupported extends Error {
  override readonly name = 'DomainEventsUnsupported';
}

export interface DomainEventWatch {
  /** Stops the events; none is delivered once it resolves. */
  close(): Promise<void>;
}

/** Creates and removes the disk files a machine owns (overlays and empty disks). */
export interface DiskProvisioner {
  /** Creates a qcow2 overlay backed by image, or an empty disk of sizeGiB. Existing file: kept. */
  createDisk(file: string, opts: { backingImage?: string; sizeGiB?: number }): Promise<void>;
  /** Creates a machine's own folder (0711: qemu must traverse it) if missing. */
  ensureDir(path: string): Promise<void>;
  /** Removes a file or directory the agent created; missing counts as done. */
  removePath(path: string): Promise<void>;
  /** Whether a regular file is at path (a link or a directory there is not one the agent made). */
  fileExists(path: string): Promise<boolean>;
  /** Renames a file inside its folder, replacing what is at `to`; the name is moved, never followed. */
  renameFile(from: string, to: string): Promise<void>;
}
