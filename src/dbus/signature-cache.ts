import { createRequire } from 'node:module';

// dbus-next parses the signature string of every variant it reads into a new tree: a message's
// header fields are variants, and GetManagedObjects with 10,000 machines carries 160,000 of them,
// almost all of the same five signatures. Parsing each signature once and reading with the same
// tree took a dbus-next client's GetManagedObjects from ~715 to ~535 ms (docs/performance.md),
// most of it less garbage, and spares the agent a parse per header field of every inbound call.
//
// The trees are only read by dbus-next (reading, and turning the read value into JavaScript), so
// one tree can serve every message. Signatures come from any bus client, so the cache is bounded:
// only signatures of up to MAX_CACHED_LENGTH characters are kept (the agent's own are far shorter),
// and past MAX_CACHED_SIGNATURES a new one is parsed as before, each time. Worst case, a client
// that sends 256 different 32-character signatures pins about 0.7 MB of trees. A bad signature
// throws from the parse exactly as it did, and is not kept.

const MAX_CACHED_SIGNATURES = 256;
const MAX_CACHED_LENGTH = 32;

interface SignatureTree {
  type: string;
  child: SignatureTree[];
}

interface DBusBufferLike {
  readSimpleType(type: string): string;
  readStruct(tree: SignatureTree[]): unknown[];
}

interface DBusBufferPrototype {
  read(this: DBusBufferLike, signature: string): unknown[];
  readVariant(this: DBusBufferLike): [SignatureTree[], unknown[]];
}

const requireDbus = createRequire(import.meta.url);
let restore: (() => void) | undefined;

/**
 * Makes dbus-next's reader parse each signature once for the life of the process (idempotent).
 * Returns a function that puts dbus-next's own reader back (the benchmark compares the two).
 */
export function cacheDbusSignatures(): () => void {
  if (restore) return restore;
  const proto = (requireDbus('dbus-next/lib/dbus-buffer') as { prototype: DBusBufferPrototype }).prototype;
  const { parseSignature } = requireDbus('dbus-next/lib/signature') as { parseSignature(signature: string): SignatureTree[] };
  const parsed = cachedParser(parseSignature, MAX_CACHED_SIGNATURES, MAX_CACHED_LENGTH);
  const stock = { read: proto.read, readVariant: proto.readVariant };
  // The same two steps as dbus-next 0.10's own read and readVariant, with the parse looked up.
  proto.read = function read(signature) {
    return this.readStruct(parsed(signature));
  };
  proto.readVariant = function readVariant() {
    const tree = parsed(this.readSimpleType('g'));
    return [tree, this.readStruct(tree)];
  };
  const putBack = () => {
    // A stale function (from before a restore and a new install) must not undo the newer install.
    if (restore !== putBack) return;
    proto.read = stock.read;
    proto.readVariant = stock.readVariant;
    restore = undefined;
  };
  restore = putBack;
  return putBack;
}

/** `parse` memoised for up to `max` distinct signatures of up to `maxLength` characters; thrown errors are not kept. */
export function cachedParser<T>(parse: (signature: string) => T, max: number, maxLength: number): (signature: string) => T {
  const trees = new Map<string, T>();
  return (signature) => {
    let tree = trees.get(signature);
    if (tree === undefined) {
      tree = parse(signature);
      if (trees.size < max && signature.length <= maxLength) trees.set(signature, tree);
    }
    return tree;
  };
}
