/** vmkeeperctl's own version; a unit test keeps it equal to package.json. */
export const CTL_VERSION = '0.1.0';
