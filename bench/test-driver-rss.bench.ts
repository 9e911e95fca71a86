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
import { benchSpec, machineName } from './fixtures.js';
import { domainNameFor } from '../src/machine/names.js';
import { serialLogFile } from '../src/machine/paths.js';

// Where a packaged agent keeps them; the test driver reads neither.
const STATE_DIR = '/var/lib/vmkeeper';
const IMAGE_DIR = `${STATE_DIR}/images`;
const MiB = (kib: number) => `${(kib / 1024).toFixed(1)} MiB`;

export async function testDriverRss(count = 10_000): Promise<string> {
  const hypervisor = new Hypervisor({ uri: 'test:///default' });
  await hypervisor.connectOpen();
  const before = rssKiB(process.pid);
  const { cpus, memoryMiB, domainType, boot } = benchSpec(IMAGE_DIR);
  for (let i = 0; i < count; i++) {
    const name = machineName(i);
    await hypervisor.domainDefineXML(
      buildDomainXml({
        domainName: domainNameFor(name),
        uuid: randomUUID(),
        machineName: name,
        domainType,
        cpus,
        memoryMiB,
        ...(boot && { boot }),
        diskFiles: [],
        nics: [],
        serialLogFile: serialLogFile(STATE_DIR, name),
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
