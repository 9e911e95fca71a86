// Which calls change state, and the polkit action each needs (config/org.vmkeeper1.policy).
// Reads are not listed: they stay open to everyone, as the bus policy has them.

export const ACTION_CREATE = 'org.vmkeeper1.create-machine';
export const ACTION_DELETE = 'org.vmkeeper1.delete-machine';
export const ACTION_POWER = 'org.vmkeeper1.set-power';
export const ACTION_ANNOTATE = 'org.vmkeeper1.set-annotations';
/** Drain and Undrain: every machine of the host off, or back on. */
export const ACTION_DRAIN = 'org.vmkeeper1.drain';

export const ALL_ACTIONS = [ACTION_CREATE, ACTION_DELETE, ACTION_POWER, ACTION_ANNOTATE, ACTION_DRAIN] as const;
export type ActionId = (typeof ALL_ACTIONS)[number];

/** "interface.member" -> action, for every mutating method of both interfaces. */
const MUTATING_MEMBERS: Record<string, ActionId> = {
  'org.vmkeeper1.Manager.CreateMachine': ACTION_CREATE,
  'org.vmkeeper1.Manager.DeleteMachine': ACTION_DELETE,
  'org.vmkeeper1.Manager.DeleteMachineWithGracePeriod': ACTION_DELETE,
  'org.vmkeeper1.Manager.SetMachinePower': ACTION_POWER,
  'org.vmkeeper1.Manager.SetMachineAnnotations': ACTION_ANNOTATE,
  'org.vmkeeper1.Manager.SetMachineAnnotationsIfVersion': ACTION_ANNOTATE,
  'org.vmkeeper1.Manager.SetMachinePowerIfVersion': ACTION_POWER,
  'org.vmkeeper1.Manager.DeleteMachineIfVersion': ACTION_DELETE,
  'org.vmkeeper1.Manager.Drain': ACTION_DRAIN,
  'org.vmkeeper1.Manager.Undrain': ACTION_DRAIN,
  'org.vmkeeper1.Machine.Delete': ACTION_DELETE,
  'org.vmkeeper1.Machine.DeleteWithGracePeriod': ACTION_DELETE,
  'org.vmkeeper1.Machine.SetPower': ACTION_POWER,
};

/** The action a call needs, or undefined for a read (or a member we do not serve). */
export function actionFor(iface: string | undefined, member: string | undefined): ActionId | undefined {
  if (iface === undefined || member === undefined) return undefined;
  return Object.hasOwn(MUTATING_MEMBERS, `${iface}.${member}`) ? MUTATING_MEMBERS[`${iface}.${member}`] : undefined;
}
