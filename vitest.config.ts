import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 30_000,
    hookTimeout: 120_000,
    // Integration suites start their own dbus-daemon/libvirtd; run files one at a time so two
    // suites never race for the same CPU-heavy guest boots on a 2-core machine.
    fileParallelism: false,
    reporters: ['default'],
  },
});
