import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { Hypervisor } from '@unraid/libvirt';
import { describe, expect, it } from 'vitest';
import { PROJECT_ROOT } from '../../support/dbus-daemon.js';
import { waitFor } from '../../support/wait.js';

// The agent's addon itself (native/domain-events.c), without the TypeScript around it: what its
// callback sees after close(), and a watch whose JavaScript side went away without close() (Node
// frees its thread-safe function at the teardown of a worker while libvirt still holds the watch).

const ADDON = path.join(PROJECT_ROOT, 'native/build/Release/domain_events.node');
interface Watch { close(): Promise<void> }
const addon = createRequire(import.meta.url)(ADDON) as {
  open(uri: string, onEvent: (name: string | null, event: number, detail: number) => void): Promise<Watch>;
};

// test:///default holds a running domain named "test" in every process that opens it.
async function suspendAndResume(times: number): Promise<void> {
  const hv = new Hypervisor({ uri: 'test:///default' });
  await hv.connectOpen();
  try {
    const dom = await hv.domainLookupByName('test');
    for (let i = 0; i < times; i++) {
      await hv.domainSuspend(dom);
      await hv.domainResume(dom);
    }
  } finally {
    await hv.connectClose();
  }
}

describe('the domain events addon', () => {
  it('calls nothing after close(), while another watch still hears every event', async () => {
    const closedOne: string[] = [];
    const openOne: Array<[string | null, number]> = [];
    const first = await addon.open('test:///default', (name) => void closedOne.push(String(name)));
    const second = await addon.open('test:///default', (name, event) => void openOne.push([name, event]));
    await first.close();
    expect(() => first.close()).toThrow(/not a libvirt-events watch/);
    await suspendAndResume(3);
    // VIR_DOMAIN_EVENT_SUSPENDED = 3, VIR_DOMAIN_EVENT_RESUMED = 4, in order.
    await waitFor(() => openOne.length >= 6, { timeoutMs: 10_000, what: 'six events on the open watch' });
    expect(openOne.slice(0, 6)).toEqual([['test', 3], ['test', 4], ['test', 3], ['test', 4], ['test', 3], ['test', 4]]);
    expect(closedOne).toEqual([]);
    await second.close();
  });

  it('survives a worker that exits with its watch open, and events after it', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'vmk-addon-'));
    const script = path.join(dir, 'worker-exit.mjs');
    await writeFile(script, `
import { Worker, isMainThread, parentPort } from 'node:worker_threads';
import { createRequire } from 'node:module';
const require = createRequire(${JSON.stringify(path.join(PROJECT_ROOT, 'package.json'))});
if (!isMainThread) {
  await require(${JSON.stringify(ADDON)}).open('test:///default', () => {});
  parentPort.postMessage('opened'); // and exits without close()
} else {
  const { Hypervisor } = await import(${JSON.stringify(path.join(PROJECT_ROOT, 'node_modules/@unraid/libvirt/dist/index.js'))});
  const hv = new Hypervisor({ uri: 'test:///default' });
  await hv.connectOpen();
  const worker = new Worker(new URL(import.meta.url));
  await new Promise((r) => worker.on('exit', r));
  const dom = await hv.domainLookupByName('test');
  for (let i = 0; i < 500; i++) { await hv.domainSuspend(dom); await hv.domainResume(dom); }
  await hv.connectClose();
  console.log('survived');
}
`);
    try {
      const { stdout } = await promisify(execFile)(process.execPath, [script], { timeout: 60_000 });
      expect(stdout.trim()).toBe('survived');
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }, 90_000);
});
