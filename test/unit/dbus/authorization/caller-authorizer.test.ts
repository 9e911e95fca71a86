import { describe, expect, it } from 'vitest';
import { ACTION_CREATE } from '../../../../src/dbus/authorization/actions.js';
import { PolkitAuthorizer, type AuthorizationMode } from '../../../../src/dbus/authorization/caller-authorizer.js';
import type { AuthorizationQuery, PolkitClient, PolkitVerdict } from '../../../../src/dbus/authorization/polkit-authority.js';
import type { LogFields, Logger } from '../../../../src/logging/logger.js';
import { FakeClock } from '../../../support/fakes/fake-clock.js';

class ScriptedPolkit implements PolkitClient {
  presentAnswers: Array<boolean | Error> = [true];
  verdict: PolkitVerdict | Error = { authorized: true };
  probes = 0;
  checks: AuthorizationQuery[] = [];
  async present(): Promise<boolean> {
    const answer = this.presentAnswers[Math.min(this.probes++, this.presentAnswers.length - 1)]!;
    if (answer instanceof Error) throw answer;
    return answer;
  }
  async check(q: AuthorizationQuery): Promise<PolkitVerdict> {
    this.checks.push(q);
    if (this.verdict instanceof Error) throw this.verdict;
    return this.verdict;
  }
}

function logs() {
  const lines: string[] = [];
  const log = (level: string) => (m: string, _f?: LogFields) => lines.push(`${level}: ${m}`);
  const logger: Logger = { error: log('error'), warn: log('warn'), info: log('info'), debug: log('debug') };
  return { lines, logger };
}

const QUERY: AuthorizationQuery = { sender: ':1.7', action: ACTION_CREATE, allowInteraction: false };

function rig(mode: AuthorizationMode) {
  const polkit = new ScriptedPolkit();
  const clock = new FakeClock();
  const { lines, logger } = logs();
  const authorizer = new PolkitAuthorizer({ mode, polkit, logger, clock, reprobeMs: 60_000 });
  return { polkit, clock, lines, authorizer };
}

describe('PolkitAuthorizer', () => {
  it('passes what polkit authorizes, with the query as given', async () => {
    const r = rig('polkit');
    await expect(r.authorizer.authorize({ ...QUERY, allowInteraction: true })).resolves.toBeUndefined();
    expect(r.polkit.checks).toEqual([{ ...QUERY, allowInteraction: true }]);
  });

  it.each([
    [{ authorized: false, challenge: false } as PolkitVerdict, `not authorized for ${ACTION_CREATE}`],
    [{ authorized: false, challenge: true } as PolkitVerdict, 'polkit requires authentication'],
  ])('refuses a denial by name, naming the action (%j)', async (verdict, text) => {
    const r = rig('polkit');
    r.polkit.verdict = verdict;
    const err = await r.authorizer.authorize(QUERY).catch((e: unknown) => e);
    expect(err).toMatchObject({ kind: 'AccessDenied', dbusName: 'org.freedesktop.DBus.Error.AccessDenied' });
    expect((err as Error).message).toContain(text);
    expect((err as Error).message).toContain(ACTION_CREATE);
  });

  it('fails closed when polkit errs or times out', async () => {
    const r = rig('polkit');
    r.polkit.verdict = new Error('polkit did not answer within 25000 ms');
    const err = (await r.authorizer.authorize(QUERY).catch((e: unknown) => e)) as Error;
    expect(err).toMatchObject({ kind: 'AccessDenied' });
    expect(err.message).toMatch(/cannot check authorization for org\.vmkeeper1\.create-machine with polkit, refused: polkit did not answer/);
    expect(r.lines.some((l) => l.startsWith('warn: polkit check failed'))).toBe(true);
  });

  it('"polkit" never falls back: an absent polkit is an error, not an allow', async () => {
    const r = rig('polkit');
    r.polkit.verdict = new Error('org.freedesktop.DBus.Error.ServiceUnknown');
    await expect(r.authorizer.authorize(QUERY)).rejects.toMatchObject({ kind: 'AccessDenied' });
    expect(r.polkit.probes).toBe(0);
  });

  it('"bus-policy" allows without asking polkit and says so once', async () => {
    const r = rig('bus-policy');
    await r.authorizer.authorize(QUERY);
    await r.authorizer.authorize(QUERY);
    expect(r.polkit.checks).toHaveLength(0);
    expect(r.lines.filter((l) => l.includes('guarded by the D-Bus policy alone'))).toHaveLength(1);
  });

  it('"auto" without polkit relies on the bus policy, logs once, and asks the bus again after reprobeMs', async () => {
    const r = rig('auto');
    r.polkit.presentAnswers = [false, true];
    await r.authorizer.authorize(QUERY);
    await r.authorizer.authorize(QUERY);
    expect(r.polkit.probes).toBe(1);
    expect(r.polkit.checks).toHaveLength(0);
    expect(r.lines.filter((l) => l.includes('polkit (org.freedesktop.PolicyKit1) is not on the bus'))).toHaveLength(1);
    await r.clock.advance(60_000);
    r.polkit.verdict = { authorized: false, challenge: false };
    await expect(r.authorizer.authorize(QUERY)).rejects.toMatchObject({ kind: 'AccessDenied' });
    expect(r.polkit.probes).toBe(2);
    // Once present, polkit is believed while its checks answer.
    await expect(r.authorizer.authorize(QUERY)).rejects.toMatchObject({ kind: 'AccessDenied' });
    expect(r.polkit.probes).toBe(2);
  });

  it('"auto" fails closed when the bus cannot say whether polkit is there', async () => {
    const r = rig('auto');
    r.polkit.presentAnswers = [new Error('the bus did not answer')];
    await expect(r.authorizer.authorize(QUERY)).rejects.toMatchObject({ kind: 'AccessDenied' });
    expect(r.polkit.checks).toHaveLength(0);
  });

  it('"auto" hands back to the bus policy when polkit leaves the bus, and says so', async () => {
    const r = rig('auto');
    r.polkit.presentAnswers = [true, false];
    await r.authorizer.authorize(QUERY);
    r.polkit.verdict = new Error('org.freedesktop.DBus.Error.ServiceUnknown');
    await expect(r.authorizer.authorize(QUERY)).resolves.toBeUndefined();
    expect(r.polkit.probes).toBe(2);
    expect(r.lines.filter((l) => l.includes('left the bus'))).toHaveLength(1);
  });

  it('"auto" still fails closed when polkit is there but its check fails', async () => {
    const r = rig('auto');
    r.polkit.presentAnswers = [true];
    r.polkit.verdict = new Error('polkit did not answer within 25000 ms');
    await expect(r.authorizer.authorize(QUERY)).rejects.toMatchObject({ kind: 'AccessDenied' });
    expect(r.polkit.probes).toBe(2);
  });
});
