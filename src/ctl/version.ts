import { VERSION } from '../version.js';

/** vmkeeperctl's own version: package.json's, like the agent's. */
export const CTL_VERSION = VERSION;
