// One hostile bus client for dbus-input.test.ts, run as an unprivileged user: sends COUNT calls of
// GetMachine (which takes "s") with a BYTES-long "au" body (decoded, it would be BYTES/4 numbers),
// and prints how each one was answered. dbus-next's marshaller needs about a second per MB for
// arrays, so the body is framed here by hand.
// Usage: node flood-sender.mjs <dbus-next address> <count> <bytes>
import { createRequire } from 'node:module';
import dbus from 'dbus-next';

const { marshallMessage } = createRequire(import.meta.url)('dbus-next/lib/marshall-compat');
const [address, count, bytes] = process.argv.slice(2).map((a, i) => (i === 0 ? a : Number(a)));
const bus = dbus.sessionBus({ busAddress: address });
bus.on('error', () => {});
// A round trip to the bus itself: after it, Hello is done and the socket is ours to write.
await bus.call(new dbus.Message({ destination: 'org.freedesktop.DBus', path: '/org/freedesktop/DBus', interface: 'org.freedesktop.DBus', member: 'GetId' }));

const payload = Buffer.alloc(bytes - (bytes % 4));
function hugeCall(serial) {
  const empty = new dbus.Message({ destination: 'org.vmkeeper1', path: '/org/vmkeeper1', interface: 'org.vmkeeper1.Manager', member: 'GetMachine', signature: 'au', body: [[]] });
  empty.serial = serial;
  const [frame] = marshallMessage(empty); // little-endian; its body is the empty array's length (4 bytes)
  const head = Buffer.from(frame.subarray(0, frame.length - 4));
  head.writeUInt32LE(4 + payload.length, 4);
  const length = Buffer.alloc(4);
  length.writeUInt32LE(payload.length, 0);
  return Buffer.concat([head, length, payload]);
}

const pending = new Map();
const answers = new Promise((resolve) => {
  const out = [];
  bus.on('message', (m) => {
    const started = pending.get(m.replySerial);
    if (started === undefined) return;
    pending.delete(m.replySerial);
    out.push({ errorName: m.errorName ?? 'none', ms: performance.now() - started });
    if (out.length === count) resolve(out);
  });
});
const stream = bus._connection.stream;
for (let i = 0; i < count; i++) {
  const serial = bus.newSerial();
  pending.set(serial, performance.now());
  stream.write(hugeCall(serial));
}
process.stdout.write(`${JSON.stringify(await answers)}\n`);
bus.disconnect();
