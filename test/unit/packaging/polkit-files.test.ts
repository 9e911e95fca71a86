import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { ALL_ACTIONS } from '../../../src/dbus/authorization/actions.js';

// The shipped polkit files name exactly the actions the agent asks for, and both packages install them.
const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
const read = (file: string) => readFileSync(path.join(REPO, file), 'utf8');

describe('shipped polkit files', () => {
  const policy = read('config/org.vmkeeper1.policy');

  it('declare every action the agent checks, and no other', () => {
    const ids = [...policy.matchAll(/<action id="([^"]+)">/g)].map((m) => m[1]);
    expect(ids.sort()).toEqual([...ALL_ACTIONS].sort());
  });

  it('ask an administrator in an active session and refuse everyone else by default', () => {
    const actions = policy.split('<action ').slice(1);
    expect(actions).toHaveLength(ALL_ACTIONS.length);
    for (const action of actions) {
      expect(action).toContain('<allow_any>no</allow_any>');
      expect(action).toContain('<allow_inactive>no</allow_inactive>');
      expect(action).toContain('<allow_active>auth_admin</allow_active>');
    }
  });

  it('allow root and group vmkeeper by the shipped rule', () => {
    const rules = read('config/50-org.vmkeeper1.rules');
    expect(rules).toContain('subject.user === "root"');
    expect(rules).toContain('subject.isInGroup("vmkeeper")');
    expect(rules).toContain('action.id.indexOf("org.vmkeeper1.") === 0');
  });

  it.each([
    ['packaging/deb/debian/rules', '$(PKG)/usr/share/polkit-1'],
    ['packaging/rpm/vmkeeper.spec', '%{buildroot}%{_datadir}/polkit-1'],
  ])('%s installs both files', (file, root) => {
    const text = read(file);
    expect(text).toContain(`config/org.vmkeeper1.policy ${root}/actions/org.vmkeeper1.policy`);
    expect(text).toContain(`config/50-org.vmkeeper1.rules ${root}/rules.d/50-org.vmkeeper1.rules`);
  });
});
