// What each property declares in org.freedesktop.DBus.Property.EmitsChangedSignal, so clients
// (GLib's GDBusProxy, sd-bus's property cache) know which values they may cache and for how long.

export const EMITS_CHANGED_SIGNAL = 'org.freedesktop.DBus.Property.EmitsChangedSignal';

/** `true`: PropertiesChanged carries the new value; `const`: never changes while the object lives. */
export type EmitsChangedSignal = 'true' | 'invalidates' | 'const' | 'false';

/** The properties that never change; every other one is announced with its value (SnapshotInterface.setValues). */
const CONSTANT_PROPERTIES: Record<string, readonly string[]> = {
  // Set when the record is created; the domain is always defined from them again.
  // The spec's lifecycle settings too: a spec does not change once the machine exists.
  'org.vmkeeper1.Machine': ['Name', 'Uuid', 'DomainName', 'CreatedAt', 'HostShutdownAction', 'ShutdownPriority', 'StartPriority'],
  // Fixed for the life of the process: a configuration reload does not change them.
  'org.vmkeeper1.Manager': ['Version', 'LibvirtUri'],
};

export function emitsChangedSignal(iface: string, property: string): EmitsChangedSignal {
  return CONSTANT_PROPERTIES[iface]?.includes(property) ? 'const' : 'true';
}
