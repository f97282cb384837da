import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    exclude: ['test/gpu/**'],
    // The tests run dist/cli.js; build it when it is stale.
    globalSetup: ['test/global-setup.ts'],
    testTimeout: 60_000,
  },
});
