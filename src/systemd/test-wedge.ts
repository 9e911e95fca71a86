import type { Logger } from '../logging/logger.js';

// TEST ONLY. With VMKEEPER_TEST_WEDGE=1 in the environment, SIGUSR2 blocks the event loop for
// good (Atomics.wait on a buffer nobody notifies), so the integration tests can show that the
// watchdog stops pinging and systemd kills and restarts the agent. Never set it in production;
// without the variable SIGUSR2 keeps Node's default (it terminates the process).

export function installTestWedge(env: NodeJS.ProcessEnv, logger: Logger): boolean {
  if (env.VMKEEPER_TEST_WEDGE !== '1') return false;
  logger.warn('VMKEEPER_TEST_WEDGE=1: SIGUSR2 will block the event loop (test-only trigger)');
  process.on('SIGUSR2', () => {
    logger.error('TEST WEDGE: SIGUSR2 received, blocking the event loop forever');
    // Give the log line a moment to reach the journal, then block without burning CPU.
    setTimeout(() => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0), 50);
  });
  return true;
}
