import { connectBus } from '../src/dbus/bus-address.js';
import { DBusService } from '../src/dbus/dbus-service.js';
import { silentLogger } from '../src/logging/logger.js';
import { MemoryMachineApi } from '../test/support/memory-machine-api.js';
import { startSystemBus } from '../test/support/dbus-daemon.js';
import { busctl, dbusSend, NOBODY } from '../test/support/busctl.js';
const bus = await startSystemBus();
console.log(bus.address);
const conn = await connectBus(bus.address);
const api = new MemoryMachineApi();
const svc = new DBusService({ bus: conn, api, logger: console as any });
await svc.start();
await api.create('web-1', '{"disks":[{"name":"root","sizeGiB":1}]}');
for (const args of [
  ['--json=short','call','org.vmkeeper1','/org/vmkeeper1','org.vmkeeper1.Manager','ListMachines'],
  ['--json=short','call','org.vmkeeper1','/org/vmkeeper1','org.vmkeeper1.Manager','GetMachine','s','nope'],
  ['--json=short','get-property','org.vmkeeper1','/org/vmkeeper1/machine/web_2d1','org.vmkeeper1.Machine','CreatedAt'],
  ['--json=short','set-property','org.vmkeeper1','/org/vmkeeper1/machine/web_2d1','org.vmkeeper1.Machine','Name','s','x'],
  ['introspect','org.vmkeeper1','/org/vmkeeper1'],
  ['--json=short','call','org.vmkeeper1','/org/vmkeeper1','org.freedesktop.DBus.ObjectManager','GetManagedObjects'],
]) { const r = await busctl(bus.address, args); console.log(r.code, r.stdout.slice(0, 3000), r.stderr); }
console.log(await busctl(bus.address, ['--json=short','call','org.vmkeeper1','/org/vmkeeper1','org.vmkeeper1.Manager','ListMachines'], { as: NOBODY }));
console.log(await busctl(bus.address, ['--json=short','call','org.vmkeeper1','/org/vmkeeper1','org.vmkeeper1.Manager','DeleteMachine','s','web-1'], { as: NOBODY }));
console.log(await dbusSend(bus.address, '/org/vmkeeper1', 'org.vmkeeper1.Manager.DeleteMachine', ['string:web-1'], { as: NOBODY }));
console.log(await dbusSend(bus.address, '/org/vmkeeper1', 'org.vmkeeper1.Manager.GetMachine', ['string:zzz']));
api.failNext('list', new Error('boom\n  at foo'));
console.log(await dbusSend(bus.address, '/org/vmkeeper1', 'org.vmkeeper1.Manager.ListMachines', []));
await svc.stop();
conn.disconnect();
await bus.stop();
