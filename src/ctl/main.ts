#!/usr/bin/env node
import { cacheDbusSignatures } from '../dbus/signature-cache.js';
import { systemClock } from '../lifecycle/clock.js';
import { runCli } from './cli.js';
import { DBusClient } from './client.js';
import { processIo } from './io.js';

// vmkeeperctl: the process edge. Everything else gets its streams, clock and client passed in.

cacheDbusSignatures();
const abort = new AbortController();
for (const sig of ['SIGINT', 'SIGTERM'] as const) {
  process.on(sig, () => {
    // A second Ctrl-C ends at once, even if something hangs.
    if (abort.signal.aborted) process.exit(130);
    abort.abort();
  });
}
// A closed pipe (vmkeeperctl list | head) is not an error worth a stack trace.
process.stdout.on('error', (err: NodeJS.ErrnoException) => {
  if (err.code === 'EPIPE') process.exit(0);
});

const code = await runCli(process.argv.slice(2), {
  io: processIo(process.env),
  clock: systemClock,
  env: process.env,
  connect: (address) => DBusClient.connect(address),
  signal: abort.signal,
});
process.exit(code);
