import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/gpu/**/*.test.ts'],
    testTimeout: 600_000,
  },
});
