import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { LibvirtHypervisor } from '../../../src/hypervisor/libvirt/libvirt-hypervisor.js';
import { systemClock } from '../../../src/lifecycle/clock.js';
import { silentLogger } from '../../../src/logging/logger.js';
import { isAgentError } from '../../../src/machine/errors.js';
import { descriptionFor, runHypervisorContract } from '../../contract/hypervisor-contract.js';
import { waitFor } from '../../support/wait.js';

// libvirt's built-in test driver: a test:///ABS/PATH.xml URI starts from that node file with
// fresh state per connection, so every test gets an empty hypervisor of its own.
const EMPTY_NODE = '<node/>\n';

async function testDriver(nodeXml = EMPTY_NODE) {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'vmkeeper-libvirt-test-'));
  const nodeFile = path.join(dir, 'node.xml');
  await writeFile(nodeFile, nodeXml);
  const hv = new LibvirtHypervisor({ uri: `test://${nodeFile}`, callTimeoutMs: 10_000, logger: silentLogger, clock: systemClock });
  return {
    hv,
    cleanup: async () => {
      await hv.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

runHypervisorContract('LibvirtHypervisor on the test driver', () => testDriver());

describe('LibvirtHypervisor specifics', () => {
  it('reports a paused domain as paused from the listings alone', async () => {
    const { hv, cleanup } = await testDriver(`<node xmlns:test='http://libvirt.org/schemas/domain/test/1.0'>
  <domain type='test'>
    <name>vmkeeper-held</name>
    <uuid>6f1c3a52-6a5e-4d4e-9a0f-2f4b8c1d2e3f</uuid>
    <memory>65536</memory>
    <os><type>hvm</type></os>
    <test:runstate>3</test:runstate>
  </domain>
  <domain type='test'>
    <name>host-own</name>
    <memory>65536</memory>
    <os><type>hvm</type></os>
  </domain>
</node>
`);
    try {
      expect(await hv.listDomains()).toEqual([{ name: 'vmkeeper-held', state: 'paused' }]);
      expect(await hv.domainState('vmkeeper-held')).toBe('paused');
      expect(await hv.domainState('host-own')).toBe('running');
      // Defined outside the agent: its UUID, and no vmkeeper mark.
      expect(await hv.domainIdentity('vmkeeper-held')).toEqual({ uuid: '6f1c3a52-6a5e-4d4e-9a0f-2f4b8c1d2e3f', machineName: undefined });
    } finally {
      await cleanup();
    }
  });

  it('connects lazily on the first call', async () => {
    const { hv, cleanup } = await testDriver();
    try {
      expect(hv.isConnected()).toBe(false);
      expect(await hv.listDomains()).toEqual([]);
      expect(hv.isConnected()).toBe(true);
    } finally {
      await cleanup();
    }
  });

  it('maps an unreachable daemon to HypervisorUnavailable and stays retryable', async () => {
    const hv = new LibvirtHypervisor({
      uri: 'qemu+unix:///system?socket=/nonexistent/vmkeeper-test.sock',
      callTimeoutMs: 10_000,
      logger: silentLogger,
      clock: systemClock,
    });
    for (let attempt = 0; attempt < 2; attempt++) {
      const err = await hv.connect().then(() => undefined, (e: unknown) => e);
      expect(isAgentError(err, 'HypervisorUnavailable')).toBe(true);
      expect((err as Error).message).toMatch(/Failed to connect socket/);
      expect(hv.isConnected()).toBe(false);
    }
  });

  it('refuses calls after close until connect is called again', async () => {
    const { hv, cleanup } = await testDriver();
    try {
      await hv.connect();
      await hv.close();
      const err = await hv.listDomains().then(() => undefined, (e: unknown) => e);
      expect(isAgentError(err, 'HypervisorUnavailable')).toBe(true);
      await hv.connect();
      expect(await hv.listDomains()).toEqual([]);
    } finally {
      await cleanup();
    }
  });

  it('rejects a description libvirt refuses (a malformed UUID) with libvirt\'s message and keeps the connection', async () => {
    const { hv, cleanup } = await testDriver();
    try {
      const def = descriptionFor('bad');
      await expect(hv.defineDomain({ ...def, uuid: 'not-a-uuid' })).rejects.toThrow(/libvirt call domainDefineXML\(vmkeeper-bad\) failed/);
      expect(hv.isConnected()).toBe(true);
    } finally {
      await cleanup();
    }
  });

  it('times out against a daemon that accepts but never answers, then reconnects afresh', async () => {
    // A socket that swallows libvirt's RPCs stands in for a hung libvirtd.
    const dir = await mkdtemp(path.join(os.tmpdir(), 'vmkeeper-hung-'));
    const socketPath = path.join(dir, 'libvirt-sock');
    const accepted: net.Socket[] = [];
    const server = net.createServer((s) => accepted.push(s));
    await new Promise<void>((r) => server.listen(socketPath, r));
    const hv = new LibvirtHypervisor({ uri: `qemu+unix:///system?socket=${socketPath}`, callTimeoutMs: 300, logger: silentLogger, clock: systemClock });
    try {
      const err = await hv.connect().then(() => undefined, (e: unknown) => e);
      expect(isAgentError(err, 'HypervisorUnavailable')).toBe(true);
      expect((err as Error).message).toBe('libvirt call connectOpen timed out after 300 ms');
      expect(hv.isConnected()).toBe(false);
      // While that open is still hung it holds a pool thread: a retry fails fast instead of parking another.
      const refused = await hv.connect().then(() => undefined, (e: unknown) => e);
      expect(isAgentError(refused, 'HypervisorUnavailable')).toBe(true);
      expect((refused as Error).message).toMatch(/not attempted: 1 earlier calls .* have not returned yet/);
      expect(accepted.length).toBe(1);
      accepted[0]!.destroy(); // the hung open fails now and frees its thread
      // Once the hung open has failed and freed its thread, a retry opens a second, fresh connection.
      await waitFor(async () => (await hv.connect().catch(() => undefined), accepted.length === 2), { timeoutMs: 2000, intervalMs: 10, what: 'a fresh connection' });
      expect(accepted.length).toBe(2);
    } finally {
      // Hanging up lets the abandoned native calls fail and free their pool threads.
      for (const s of accepted) s.destroy();
      await new Promise((r) => server.close(r));
      await rm(dir, { recursive: true, force: true });
    }
  });
});
