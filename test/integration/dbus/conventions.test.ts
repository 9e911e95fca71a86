import { execFile } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { MessageBus } from 'dbus-next';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectBus } from '../../../src/dbus/bus-address.js';
import { DBusService } from '../../../src/dbus/dbus-service.js';
import { silentLogger } from '../../../src/logging/logger.js';
import { machineObjectPath } from '../../../src/machine/names.js';
import { busctlCall } from '../../support/busctl.js';
import { startSessionBus, type PrivateBus } from '../../support/dbus-daemon.js';
import { Harness as AgentCore, SPEC } from '../../support/agent-harness.js';

// The faults of a call answered as sd-bus and GLib services answer them, seen by two clients that
// share no code with the agent: dbus-python (libdbus) sends raw calls with explicit signatures,
// gdbus (GLib) introspects. docs/dbus-api.md, Conventions.

const PYTHON = '/usr/bin/python3';
const CLIENT = path.join(path.dirname(fileURLToPath(import.meta.url)), 'clients', 'conventions_client.py');
const E = (name: string) => `org.freedesktop.DBus.Error.${name}`;

function exec(file: string, args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(file, args, { timeout: 30_000, encoding: 'utf8' }, (err, stdout, stderr) =>
      err ? reject(new Error(`${file} failed: ${err.message}\n${stderr}`)) : resolve(stdout),
    );
  });
}

describe('D-Bus conventions with independent clients', () => {
  let daemon: PrivateBus;
  let conn: MessageBus;
  let core: AgentCore;
  let service: DBusService;
  const name = 'conv-1';

  beforeAll(async () => {
    daemon = await startSessionBus();
    conn = await connectBus(daemon.address);
    core = await new AgentCore({ config: (c) => (c.libvirt.uri = 'test:///default') }).start();
    service = new DBusService({ bus: conn, api: core.service, logger: silentLogger });
    await service.start();
    await busctlCall(daemon.address, '/org/vmkeeper1', 'org.vmkeeper1.Manager', 'CreateMachine', 'ss', [name, SPEC]);
  });
  afterAll(async () => {
    await service?.stop();
    await core?.agent.stop();
    conn?.disconnect();
    await daemon?.stop();
  });

  it('dbus-python gets the standard error names and typed a{sv}', async () => {
    const out = JSON.parse(await exec(PYTHON, [CLIENT, daemon.address, name, machineObjectPath(name)])) as Record<string, unknown>;
    expect(out['wrong-signature']).toBe(E('InvalidArgs'));
    expect(out['unknown-method']).toBe(E('UnknownMethod'));
    expect(out['unknown-object']).toBe(E('UnknownObject'));
    expect(out['getall-unknown-interface']).toBe(E('UnknownInterface'));
    expect(out['get-unknown-interface']).toBe(E('UnknownInterface'));
    // Get and Set name a missing property alike; a known one is read-only.
    expect(out['get-unknown-property']).toBe(E('UnknownProperty'));
    expect(out['set-unknown-property']).toBe(E('UnknownProperty'));
    expect(out['set-read-only']).toBe(E('PropertyReadOnly'));
    expect(out['get-known']).toBe(`ok:${JSON.stringify([name])}`);
    expect(String(out['getall-known'])).toMatch(/^ok:/);
    expect(out['peer-ping']).toBe('ok:[]');
    expect(out.structured).toEqual({ signature: 'sv', name, createdAtType: 'UInt64', cpusType: 'UInt32', cpus: 1, hasDeletion: false });
  });

  it('gdbus sees EmitsChangedSignal annotations and the structured member', async () => {
    const xml = await exec('gdbus', ['introspect', '--address', daemon.address, '--dest', 'org.vmkeeper1', '--object-path', machineObjectPath(name), '--xml']);
    const property = (p: string) => new RegExp(`<property[^>]*name="${p}"[^>]*>\\s*<annotation name="org.freedesktop.DBus.Property.EmitsChangedSignal" value="([a-z]+)"`);
    expect(xml).toMatch(property('Name'));
    expect(xml.match(property('Name'))?.[1]).toBe('const');
    expect(xml.match(property('Uuid'))?.[1]).toBe('const');
    expect(xml.match(property('State'))?.[1]).toBe('true');
    const reply = await exec('gdbus', ['call', '--address', daemon.address, '--dest', 'org.vmkeeper1', '--object-path', '/org/vmkeeper1',
      '--method', 'org.vmkeeper1.Manager.DescribeMachineStructured', name]);
    expect(reply).toContain(`'name': <'${name}'>`);
    expect(reply).toMatch(/'cpus': <uint32 1>/);
  });
});
