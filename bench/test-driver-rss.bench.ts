// What libvirt's in-process test driver adds to a process's RSS when it holds the benches' domains:
// with test:///… URIs the driver runs inside the agent, so its domains count in every RSS figure
// of bench/scale.bench.ts and bench/idle.bench.ts (on a host they are libvirtd's memory instead).
// The binding alone, no agent: open test:///default, define count domains with the agent's own
// domain XML for the benches' machines, read VmRSS before and after.
// Run: npx tsx bench/test-driver-rss.bench.ts [count=10000]
import { randomUUID } from 'node:crypto';
import { Hypervisor } from '@unraid/libvirt';
import { buildDomainXml } from '../src/hypervisor/libvirt/domain-xml.js';
import { rssKiB } from './load-run.js';
import { machineName } from './fixtures.js';

const MiB = (kib: number) => `${(kib / 1024).toFixed(1)} MiB`;

export async function testDriverRss(count = 10_000): Promise<string> {
  const hypervisor = new Hypervisor({ uri: 'test:///default' });
  await hypervisor.connectOpen();
  const before = rssKiB(process.pid);
  for (let i = 0; i < count; i++) {
    const name = machineName(i);
    await hypervisor.domainDefineXML(
      buildDomainXml({
        domainName: `vmkeeper-${name}`,
        uuid: randomUUID(),
        machineName: name,
        domainType: 'qemu',
        cpus: 1,
        memoryMiB: 64,
        boot: { kernel: '/var/lib/vmkeeper/images/vmlinuz' },
        diskFiles: [],
        nics: [],
        serialLogFile: `/var/log/vmkeeper/${name}.log`,
        createdAt: Date.now(),
      }),
    );
  }
  const after = rssKiB(process.pid);
  await hypervisor.connectClose();
  return `test:///default with ${count} defined domains: RSS ${MiB(before)} -> ${MiB(after)} (+${MiB(after - before)}), the binding alone in one process`;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  console.log(await testDriverRss(Number(process.argv[2] ?? 10_000)));
}
