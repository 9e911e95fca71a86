import * as L from '@unraid/libvirt';
const { Hypervisor, ConnectListAllDomainsFlags: F } = L;
console.log(Object.keys(L));
const hv = new Hypervisor({ uri: 'test:///tmp/lvexp/node.xml' });
await hv.connectOpen();
const xml = `<domain type='test'><name>vmkeeper-a</name><memory unit='KiB'>65536</memory><os><type arch='x86_64' machine='pc'>hvm</type></os></domain>`;
const d = await hv.domainDefineXML(xml);
console.log('uuid', await d.getUUIDString());
await hv.domainDefineXML(xml.replace('vmkeeper-a','other'));
const show = async () => { for (const f of ['ACTIVE','INACTIVE','PAUSED','RUNNING','SHUTOFF']) { const l = await hv.connectListAllDomains(F[f]); console.log(f, await Promise.all(l.map(x=>x.getName()))); } };
await show();
await d.create();
try { await d.create(); } catch(e) { console.log('create twice:', JSON.stringify(e.message)); }
await show();
await d.suspend(); await show(); await d.resume();
await d.shutdown(); await show();
try { await d.shutdown(); } catch(e) { console.log('shutdown off:', JSON.stringify(e.message)); }
try { await d.destroy(); } catch(e) { console.log('destroy off:', JSON.stringify(e.message)); }
await d.undefine();
try { await d.undefine(); } catch(e) { console.log('undefine twice:', JSON.stringify(e.message)); }
try { await d.getXMLDesc(); } catch(e) { console.log('xml after undefine:', JSON.stringify(e.message)); }
try { await d.create(); } catch(e) { console.log('create after undefine:', JSON.stringify(e.message)); }
try { await hv.domainLookupByName('nope'); } catch(e) { console.log('lookup:', JSON.stringify(e.message), e.constructor.name, e.code); }
await show();
await hv.connectClose();
try { await new Hypervisor({ uri: 'qemu+unix:///system?socket=/tmp/nonexist.sock' }).connectOpen(); } catch(e) { console.log('connect fail:', JSON.stringify(e.message)); }
try { await new Hypervisor({ uri: 'test:///tmp/lvexp/nonexist.xml' }).connectOpen(); } catch(e) { console.log('connect fail2:', JSON.stringify(e.message)); }
