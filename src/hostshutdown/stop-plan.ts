import type { HostShutdownAction } from '../machine/spec.js';

// Which guest stops in which group, as a pure function of what runs and what the records say, so
// every grouping rule is a row in a table-driven test. Groups follow hostShutdown.groups as
// kubelet's shutdownGracePeriodByPodPriority does: highest priority first, each with its budget.

export interface PriorityGroupSetting {
  minPriority: number;
  budgetSec: number;
}

/** What the planner needs of a machine record: its name, its domain and its lifecycle policy. */
export interface PlannedMachine {
  name: string;
  domainName: string;
  action: HostShutdownAction;
  priority: number;
}

export interface PlannedGuest {
  /** The machine record's name; the domain name for a marked domain without a record. */
  machine: string;
  domain: string;
  action: HostShutdownAction;
  priority: number;
}

export interface PlannedGroup {
  minPriority: number;
  budgetSec: number;
  guests: PlannedGuest[];
}

export interface StopPlanInput {
  /** Names of our domains libvirt lists as active (running, paused, shutting down). */
  activeDomains: readonly string[];
  machines: readonly PlannedMachine[];
  groups: readonly PriorityGroupSetting[];
  timeoutSec: number;
}

/** Groups highest minPriority first; groups no running guest falls in are left out. */
export function planStop(input: StopPlanInput): PlannedGroup[] {
  // An empty table is one group holding every guest for the whole bound.
  const table = input.groups.length > 0 ? [...input.groups] : [{ minPriority: 0, budgetSec: input.timeoutSec }];
  table.sort((a, b) => b.minPriority - a.minPriority);
  const groups: PlannedGroup[] = table.map((g) => ({ minPriority: g.minPriority, budgetSec: g.budgetSec, guests: [] }));
  const byDomain = new Map(input.machines.map((m) => [m.domainName, m]));
  for (const domain of [...new Set(input.activeDomains)].sort()) {
    const m = byDomain.get(domain);
    // A marked domain no record claims (its record was lost) still goes down, the default way.
    const guest: PlannedGuest = m
      ? { machine: m.name, domain, action: m.action, priority: m.priority }
      : { machine: domain, domain, action: 'shutdown', priority: 0 };
    groups[groupIndexFor(guest.priority, groups)]!.guests.push(guest);
  }
  for (const g of groups) g.guests.sort((a, b) => b.priority - a.priority || a.machine.localeCompare(b.machine));
  return groups.filter((g) => g.guests.length > 0);
}

/** The group with the highest minPriority <= priority; below every group, the lowest one. */
function groupIndexFor(priority: number, descending: readonly PlannedGroup[]): number {
  const i = descending.findIndex((g) => g.minPriority <= priority);
  return i >= 0 ? i : descending.length - 1;
}
