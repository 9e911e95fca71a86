import { describe, expect, it } from 'vitest';
import { planStop, type PlannedMachine, type PriorityGroupSetting } from '../../../src/hostshutdown/stop-plan.js';

const m = (name: string, action: PlannedMachine['action'], priority: number): PlannedMachine => ({ name, domainName: `vmkeeper-${name}`, action, priority });
const dom = (...names: string[]) => names.map((n) => `vmkeeper-${n}`);

/** The plan as "minPriority/budget: machine(action,priority) ..." lines, to compare at a glance. */
function shape(groups: PriorityGroupSetting[], machines: PlannedMachine[], active: string[], timeoutSec = 120): string[] {
  return planStop({ activeDomains: active, machines, groups, timeoutSec })
    .map((g) => `${g.minPriority}/${g.budgetSec}: ${g.guests.map((x) => `${x.machine}(${x.action},${x.priority})`).join(' ')}`);
}

const TABLE = [{ minPriority: 0, budgetSec: 30 }, { minPriority: 500, budgetSec: 20 }, { minPriority: 100, budgetSec: 40 }];

describe('stop plan', () => {
  it.each([
    {
      what: 'empty table: one group with the whole bound',
      groups: [], machines: [m('a', 'save', 7), m('b', 'shutdown', 0)], active: dom('a', 'b'),
      want: ['0/120: a(save,7) b(shutdown,0)'],
    },
    {
      what: 'highest group first; each machine in the highest group whose minPriority <= its priority',
      groups: TABLE, machines: [m('low', 'shutdown', 0), m('mid', 'force', 100), m('mid2', 'save', 499), m('top', 'save', 1000)], active: dom('low', 'mid', 'mid2', 'top'),
      want: ['500/20: top(save,1000)', '100/40: mid2(save,499) mid(force,100)', '0/30: low(shutdown,0)'],
    },
    {
      what: 'below every group: the lowest group',
      groups: [{ minPriority: 100, budgetSec: 10 }, { minPriority: 50, budgetSec: 10 }], machines: [m('x', 'shutdown', 3)], active: dom('x'),
      want: ['50/10: x(shutdown,3)'],
    },
    {
      what: 'empty groups are left out',
      groups: TABLE, machines: [m('top', 'shutdown', 900)], active: dom('top'),
      want: ['500/20: top(shutdown,900)'],
    },
    {
      what: 'only active domains: a machine whose domain is off is not planned',
      groups: [], machines: [m('on', 'shutdown', 0), m('off', 'shutdown', 0)], active: dom('on'),
      want: ['0/120: on(shutdown,0)'],
    },
    {
      what: 'a marked domain without a record: shutdown, priority 0, named by its domain',
      groups: TABLE, machines: [], active: dom('orphan'),
      want: ['0/30: vmkeeper-orphan(shutdown,0)'],
    },
    {
      what: 'within a group: higher priority first, then by name',
      groups: [], machines: [m('b', 'shutdown', 5), m('a', 'shutdown', 5), m('c', 'shutdown', 9)], active: dom('a', 'b', 'c'),
      want: ['0/120: c(shutdown,9) a(shutdown,5) b(shutdown,5)'],
    },
    { what: 'nothing running: no groups', groups: TABLE, machines: [m('a', 'save', 1)], active: [], want: [] },
  ])('$what', ({ groups, machines, active, want }) => {
    expect(shape(groups, machines, active)).toEqual(want);
  });

  it('a domain listed twice is planned once, and the input table is not reordered', () => {
    const table = [...TABLE];
    const plan = planStop({ activeDomains: dom('a', 'a'), machines: [m('a', 'shutdown', 0)], groups: table, timeoutSec: 90 });
    expect(plan.flatMap((g) => g.guests)).toHaveLength(1);
    expect(table).toEqual(TABLE);
  });
});
