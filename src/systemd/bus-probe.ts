import { Message, MessageType, type MessageBus } from 'dbus-next';
import { MANAGER_PATH } from '../machine/names.js';

// The watchdog's proof that D-Bus calls are answered: a Properties.Get of our own Manager's
// Version, sent to our well-known name, so it goes through the bus daemon, the name we own and
// our exported objects exactly like a caller's request.

export function busSelfCall(bus: MessageBus, busName: string): () => Promise<void> {
  return async () => {
    const reply = await bus.call(new Message({
      destination: busName,
      path: MANAGER_PATH,
      interface: 'org.freedesktop.DBus.Properties',
      member: 'Get',
      signature: 'ss',
      body: ['org.vmkeeper1.Manager', 'Version'],
    }));
    if (!reply || reply.type === MessageType.ERROR) throw new Error(`self-call failed: ${reply?.errorName ?? 'no reply'}`);
  };
}
