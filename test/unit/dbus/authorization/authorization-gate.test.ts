import { Message, MessageType, type MessageBus } from 'dbus-next';
import { describe, expect, it } from 'vitest';
import { ACTION_DELETE, ACTION_POWER } from '../../../../src/dbus/authorization/actions.js';
import { authorizationGate } from '../../../../src/dbus/authorization/authorization-gate.js';
import type { CallerAuthorizer } from '../../../../src/dbus/authorization/caller-authorizer.js';
import type { AuthorizationQuery } from '../../../../src/dbus/authorization/polkit-authority.js';
import { AgentError } from '../../../../src/machine/errors.js';
import { silentLogger } from '../../../../src/logging/logger.js';
import { flushMicrotasks } from '../../../support/fakes/fake-clock.js';
import { deferred } from '../../../support/deferred.js';

function call(member: string, iface = 'org.vmkeeper1.Manager', o: { sender?: string; flags?: number } = {}): Message {
  const msg = new Message({ type: MessageType.METHOD_CALL, path: '/org/vmkeeper1', interface: iface, member, serial: 1, flags: o.flags ?? 0 });
  msg.sender = o.sender ?? ':1.5';
  return msg;
}

/** An authorizer whose answers the test releases one by one. */
function heldAuthorizer() {
  const pending: Array<{ query: AuthorizationQuery; answer: ReturnType<typeof deferred<void>> }> = [];
  const authorizer: CallerAuthorizer = {
    authorize(query) {
      const answer = deferred<void>();
      pending.push({ query, answer });
      return answer.promise;
    },
  };
  return { authorizer, pending };
}

function rig() {
  const sent: Message[] = [];
  const dispatched: string[] = [];
  const bus = { send: (m: Message) => sent.push(m) } as unknown as MessageBus;
  const held = heldAuthorizer();
  const gate = authorizationGate(bus, held.authorizer, silentLogger, (msg) => (dispatched.push(msg.member!), true));
  return { sent, dispatched, gate, ...held };
}

describe('authorizationGate', () => {
  it('lets reads and unknown members through untouched', () => {
    const r = rig();
    for (const m of ['ListMachines', 'GetMachine', 'DescribeMachine', 'ListEvents', 'NoSuchMember']) expect(r.gate(call(m))).toBe(false);
    expect(r.gate(call('Get', 'org.freedesktop.DBus.Properties'))).toBe(false);
    expect(r.pending).toHaveLength(0);
  });

  it('holds a mutating call until allowed, asking for its action, then dispatches it', async () => {
    const r = rig();
    expect(r.gate(call('DeleteWithGracePeriod', 'org.vmkeeper1.Machine'))).toBe(true);
    await flushMicrotasks();
    expect(r.dispatched).toEqual([]);
    expect(r.pending[0]!.query).toEqual({ sender: ':1.5', action: ACTION_DELETE, allowInteraction: false });
    r.pending[0]!.answer.resolve();
    await flushMicrotasks();
    expect(r.dispatched).toEqual(['DeleteWithGracePeriod']);
    expect(r.sent).toEqual([]);
  });

  it('passes the caller\'s ALLOW_INTERACTIVE_AUTHORIZATION flag on', () => {
    const r = rig();
    r.gate(call('SetMachinePower', undefined, { flags: 0x4 }));
    expect(r.pending[0]!.query).toMatchObject({ action: ACTION_POWER, allowInteraction: true });
  });

  it('answers a refusal with its D-Bus name and never dispatches', async () => {
    const r = rig();
    r.gate(call('CreateMachine'));
    r.pending[0]!.answer.reject(new AgentError('AccessDenied', 'not authorized for org.vmkeeper1.create-machine'));
    await flushMicrotasks();
    expect(r.dispatched).toEqual([]);
    expect(r.sent.map((m) => [m.type, m.errorName, m.body[0]])).toEqual([
      [MessageType.ERROR, 'org.freedesktop.DBus.Error.AccessDenied', 'not authorized for org.vmkeeper1.create-machine'],
    ]);
  });

  it('sends nothing back for a refused call that expects no reply', async () => {
    const r = rig();
    r.gate(call('DeleteMachine', undefined, { flags: 0x1 }));
    r.pending[0]!.answer.reject(new AgentError('AccessDenied', 'no'));
    await flushMicrotasks();
    expect(r.sent).toEqual([]);
  });

  it('keeps one sender\'s calls in arrival order whatever order the answers come in; other senders do not wait', async () => {
    const r = rig();
    r.gate(call('CreateMachine'));
    r.gate(call('SetMachinePower'));
    r.gate(call('DeleteMachine', undefined, { sender: ':1.9' }));
    r.pending[2]!.answer.resolve();
    r.pending[1]!.answer.resolve();
    await flushMicrotasks();
    expect(r.dispatched).toEqual(['DeleteMachine']);
    r.pending[0]!.answer.resolve();
    await flushMicrotasks();
    expect(r.dispatched).toEqual(['DeleteMachine', 'CreateMachine', 'SetMachinePower']);
  });
});
