import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import type { Clock } from '../../lifecycle/clock.js';
import { describeError } from '../../machine/errors.js';
import { DOMAIN_NAME_PREFIX } from '../../machine/names.js';
import { DomainEventsUnsupported, type DomainEventListener, type DomainEventWatch } from '../port.js';
import { withCallTimeout } from './call-timeout.js';

// Domain lifecycle events through the agent's own small addon (native/domain-events.c): the
// @unraid/libvirt binding has none. The addon opens a read-only connection of its own, so events
// come only where every connection sees the same domains: a libvirtd (qemu:///system, ...) or
// the shared in-process test:///default. A test:///<file> URI gives each connection domains of
// its own, so events from it would say nothing about the agent's.

/** What native/domain-events.c exports. name null: the connection closed (event: its reason). */
interface NativeDomainEvents {
  open(uri: string, onEvent: (name: string | null, event: number, detail: number) => void): Promise<{ close(): Promise<void> }>;
}

/** Built by `npm run build` (node-gyp); src/ and dist/ are both one folder below the top. */
const ADDON_FILE = fileURLToPath(new URL('../../../native/build/Release/domain_events.node', import.meta.url));

let addon: NativeDomainEvents | DomainEventsUnsupported | undefined;

function loadAddon(): NativeDomainEvents {
  if (addon === undefined) {
    try {
      addon = createRequire(import.meta.url)(ADDON_FILE) as NativeDomainEvents;
    } catch (err) {
      addon = new DomainEventsUnsupported(`cannot load the domain events addon ${ADDON_FILE} (build it with npm run build): ${describeError(err)}`);
    }
  }
  if (addon instanceof DomainEventsUnsupported) throw addon;
  return addon;
}

// virConnectCloseReason, for the log line when libvirtd goes away.
const CLOSE_REASONS = ['an error', 'the end of the stream', 'a keepalive timeout', 'the client closing it'];

/** Whether a separate connection to uri sees the same domains as the agent's own. */
export function sharesDomainsAcrossConnections(uri: string): boolean {
  return !uri.startsWith('test:') || /^test:\/\/\/default(\?|$)/.test(uri);
}

export interface WatchDomainEventsOptions {
  uri: string;
  clock: Clock;
  /** Bounds opening and closing: a hung libvirtd must not hold the caller. */
  callTimeoutMs: number;
}

export async function watchDomainEvents(o: WatchDomainEventsOptions, listener: DomainEventListener): Promise<DomainEventWatch> {
  if (!sharesDomainsAcrossConnections(o.uri)) {
    throw new DomainEventsUnsupported(`${o.uri} gives every connection domains of its own, so no event would tell of the agent's`);
  }
  const native = loadAddon();
  let open = true;
  const opening = native.open(o.uri, (name, event) => {
    if (!open) return;
    if (name === null) {
      open = false;
      listener.onEventsLost(`libvirt closed the event connection after ${CLOSE_REASONS[event] ?? `reason ${event}`}`);
    } else if (name.startsWith(DOMAIN_NAME_PREFIX)) {
      listener.onDomainEvent(name);
    }
  });
  let watch: { close(): Promise<void> };
  try {
    watch = await withCallTimeout(o.clock, o.callTimeoutMs, 'domain events: connectOpen', () => opening);
  } catch (err) {
    // An open that answers after its timeout must not leave a connection behind.
    open = false;
    void opening.then((late) => late.close(), () => undefined).catch(() => undefined);
    throw err;
  }
  let closing: Promise<void> | undefined;
  return {
    close() {
      open = false;
      closing ??= withCallTimeout(o.clock, o.callTimeoutMs, 'domain events: connectClose', () => watch.close());
      return closing;
    },
  };
}
