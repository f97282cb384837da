import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/gpu/**/*.test.ts'],
    globalSetup: ['test/global-setup.ts'],
    testTimeout: 300_000,
  },
});
