import { buildDomainXml, isOurDomainXml } from './src/hypervisor/domain-xml.js';
import { Hypervisor } from '@unraid/libvirt';
import { writeFileSync } from 'node:fs';
const xml = buildDomainXml({ domainName: 'vmkeeper-web-1', uuid: '3357c3af-fdcf-4e1b-b97b-346ece2f943a', machineName: 'web-1',
  spec: { cpus: 1, memoryMiB: 96, domainType: 'qemu', boot: { kernel: '/img/vmlinuz', initrd: '/img/i', cmdline: 'console=ttyS0 </cmdline><devices>' },
    disks: [{ name: 'root', image: '/img/a.qcow2' }, { name: 'data', sizeGiB: 1 }], nics: [{ name: 'eth0', network: 'default' }, { name: 'eth1', bridge: 'br0' }], power: 'on', annotations: { owner: "x'\"<&>\u0000\n" } },
  disks: [{ name: 'root', file: '/s/root.qcow2' }, { name: 'data', file: '/s/data.qcow2' }], serialLogFile: '/s/serial.log', createdAt: 0 });
console.log(xml);
writeFileSync('/tmp/lvexp/gen.xml', xml);
writeFileSync('/tmp/lvexp/node2.xml', '<node/>');
const hv = new Hypervisor({ uri: 'test:///tmp/lvexp/node2.xml' });
await hv.connectOpen();
const d = await hv.domainDefineXML(xml);
const back = await d.getXMLDesc();
console.log(back);
console.log(isOurDomainXml(back), isOurDomainXml(back, 'web-1'), isOurDomainXml(back, 'web-2'));
await d.create(); console.log('started');
