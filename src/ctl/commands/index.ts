import type { Command } from '../command.js';
import { annotateCommand } from './annotate.js';
import { createCommand } from './create.js';
import { deleteCommand } from './delete.js';
import { drainCommand, undrainCommand } from './drain.js';
import { eventsCommand } from './events.js';
import { listCommand } from './list.js';
import { poweroffCommand, poweronCommand } from './power.js';
import { shutdownsCommand } from './shutdowns.js';
import { statusCommand } from './status.js';
import { versionCommand } from './version.js';

/** Every command, in the order `help` lists them. */
export const COMMANDS: Command[] = [
  listCommand,
  statusCommand,
  createCommand,
  deleteCommand,
  poweroffCommand,
  poweronCommand,
  eventsCommand,
  annotateCommand,
  drainCommand,
  undrainCommand,
  shutdownsCommand,
  versionCommand,
];
