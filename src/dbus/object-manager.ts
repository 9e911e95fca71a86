import type { Variant } from 'dbus-next';
import { mapErrors } from './errors.js';
import { SnapshotInterface, configureInterface } from './interface-support.js';
import type { MarshalledArray } from './marshalled.js';

// org.freedesktop.DBus.ObjectManager on /org/vmkeeper1: dbus-next has none built in.

export const OBJECT_MANAGER_INTERFACE = 'org.freedesktop.DBus.ObjectManager';

export type InterfacesAndProperties = Record<string, Record<string, Variant>>;
export type ManagedObjects = Record<string, InterfacesAndProperties>;

export class ObjectManagerInterface extends SnapshotInterface {
  /**
   * `objects` lists the exported children (never the manager object itself, as the spec says),
   * as values or already marshalled.
   */
  constructor(private readonly objects: () => ManagedObjects | MarshalledArray) {
    super(OBJECT_MANAGER_INTERFACE);
  }

  GetManagedObjects(): Promise<ManagedObjects | MarshalledArray> {
    return mapErrors(() => this.objects());
  }

  InterfacesAdded(path: string, interfaces: InterfacesAndProperties): [string, InterfacesAndProperties] {
    return [path, interfaces];
  }

  InterfacesRemoved(path: string, interfaces: string[]): [string, string[]] {
    return [path, interfaces];
  }
}

configureInterface(ObjectManagerInterface, {
  properties: {},
  methods: {
    GetManagedObjects: { out: 'a{oa{sa{sv}}}', args: ['objects'] },
  },
  signals: {
    InterfacesAdded: { signature: 'oa{sa{sv}}', args: ['object', 'interfaces'] },
    InterfacesRemoved: { signature: 'oas', args: ['object', 'interfaces'] },
  },
});
