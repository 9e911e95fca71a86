import { Variant, interface as dbusInterface } from 'dbus-next';
import { checkOnce, unmarshallableText } from './outbound-guard.js';
import { EMITS_CHANGED_SIGNAL, emitsChangedSignal } from './property-annotations.js';

// Shared plumbing for our exported interfaces: read-only properties served from a snapshot,
// PropertiesChanged only for values that really changed, and named arguments in Introspect.

export type PropertyValues = Record<string, unknown>;

export interface MemberTable {
  /** D-Bus property name -> signature. All properties are read-only. */
  properties: Record<string, string>;
  /** D-Bus method name -> in/out signatures and argument names (in order: in args, then out args). */
  methods: Record<string, { in?: string; out?: string; args: string[] }>;
  /** D-Bus signal name -> signature and argument names. */
  signals: Record<string, { signature: string; args: string[] }>;
}

/** Milliseconds since the epoch -> the contract's microseconds as uint64, 0 when unset. */
export function usec(ms: number): bigint {
  return Number.isFinite(ms) && ms > 0 ? BigInt(Math.round(ms)) * 1000n : 0n;
}

/** A uint32 for the wire: dbus-next rejects fractions and out-of-range numbers with a stack trace. */
export function uint32(n: number | undefined): number {
  if (n === undefined || !Number.isFinite(n) || n < 0) return 0;
  return Math.min(Math.floor(n), 0xffffffff);
}

function deepFreeze<T>(value: T): T {
  if (typeof value === 'object' && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const child of Object.values(value)) deepFreeze(child);
  }
  return value;
}

function sameValue(a: unknown, b: unknown): boolean {
  if (typeof a === 'object' && a !== null && typeof b === 'object' && b !== null) {
    const ka = Object.keys(a).sort();
    const kb = Object.keys(b).sort();
    if (ka.length !== kb.length || ka.some((k, i) => k !== kb[i])) return false;
    return ka.every((k) => sameValue((a as PropertyValues)[k], (b as PropertyValues)[k]));
  }
  return a === b;
}

/** Wires a subclass's member table into dbus-next: getters read `values`, methods keep their names. */
export function configureInterface(
  klass: { prototype: SnapshotInterface; configureMembers: typeof dbusInterface.Interface.configureMembers },
  table: MemberTable,
): void {
  for (const name of Object.keys(table.properties)) {
    // dbus-next reads a property through `iface[<D-Bus name>]`, so the getter must carry that name.
    Object.defineProperty(klass.prototype, name, {
      get(this: SnapshotInterface) {
        return this.values[name];
      },
      configurable: true,
    });
  }
  klass.configureMembers({
    properties: Object.fromEntries(
      Object.entries(table.properties).map(([name, signature]) => [name, { signature, access: 'read' as const }]),
    ),
    methods: Object.fromEntries(
      Object.entries(table.methods).map(([name, m]) => [name, { inSignature: m.in ?? '', outSignature: m.out ?? '' }]),
    ),
    signals: Object.fromEntries(Object.entries(table.signals).map(([name, s]) => [name, { signature: s.signature }])),
  });
  klass.prototype.memberTable = table;
}

interface IntrospectArg {
  $: Record<string, string>;
}
interface IntrospectMember {
  $: { name: string };
  arg?: IntrospectArg[];
}
interface IntrospectProperty {
  $: { name: string };
  annotation?: IntrospectArg[];
}
interface IntrospectXml {
  property?: IntrospectProperty[];
  method?: IntrospectMember[];
  signal?: IntrospectMember[];
}

export class SnapshotInterface extends dbusInterface.Interface {
  declare memberTable: MemberTable;
  values: PropertyValues = {};
  /** Why the snapshot cannot go on the bus (checked once per change), or undefined. */
  encodingProblem: string | undefined;

  /**
   * Replaces the snapshot; emits PropertiesChanged (when `emit`) for the values that differ. An
   * unchanged snapshot is kept as it is, so what is derived from it (keyed on `values`) stays valid.
   */
  setValues(next: PropertyValues, emit = true): string[] {
    const changed = Object.keys(next).filter((k) => !sameValue(this.values[k], next[k]));
    // No change, and no property dropped (next's keys are all compared above).
    if (changed.length === 0 && Object.keys(this.values).every((k) => Object.hasOwn(next, k))) return changed;
    this.values = next;
    this.encodingProblem = unmarshallableText(next);
    if (emit && changed.length > 0) {
      dbusInterface.Interface.emitPropertiesChanged(this, Object.fromEntries(changed.map((k) => [k, next[k]])), []);
    }
    return changed;
  }

  /** All properties as a{sv}, built from the snapshot on each call and not kept. */
  protected buildVariants(): Record<string, Variant> {
    return Object.fromEntries(Object.entries(this.memberTable.properties).map(([name, sig]) => [name, new Variant(sig, this.values[name])]));
  }

  /**
   * buildVariants(), frozen and checked, for a signal (InterfacesAdded) the outbound guard then
   * need not walk again. Not kept: 16 Variants for each of 10,000 machines held 7 MiB.
   */
  variants(): Record<string, Variant> {
    const variants = deepFreeze(this.buildVariants());
    checkOnce(variants);
    return variants;
  }

  // dbus-next introspects arguments without names and properties without annotations; add both so
  // busctl introspect reads like the XML.
  $introspect(): IntrospectXml {
    const xml = (dbusInterface.Interface.prototype as unknown as { $introspect(): IntrospectXml }).$introspect.call(this);
    const name = (list: IntrospectMember[] | undefined, names: (m: string) => string[] | undefined) => {
      for (const member of list ?? []) {
        const argNames = names(member.$.name) ?? [];
        (member.arg ?? []).forEach((arg, i) => {
          if (argNames[i]) arg.$ = { name: argNames[i]!, ...arg.$ };
        });
      }
    };
    name(xml.method, (m) => this.memberTable.methods[m]?.args);
    name(xml.signal, (s) => this.memberTable.signals[s]?.args);
    for (const property of xml.property ?? []) {
      property.annotation = [{ $: { name: EMITS_CHANGED_SIGNAL, value: emitsChangedSignal((this as unknown as { $name: string }).$name, property.$.name) } }];
    }
    return xml;
  }
}
