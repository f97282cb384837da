import { defineConfig } from 'vitest/config';

// The GPU lane: `node ../../node_modules/vitest/vitest.mjs run --config vitest.gpu.config.ts`
// (or `node scripts/test-gpu.mjs` at the root). Without a GPU every suite skips and says why.
export default defineConfig({
  test: {
    include: ['test/gpu/**/*.test.ts'],
    testTimeout: 600_000,
    hookTimeout: 120_000,
    // One file at a time: the suites share one GPU.
    fileParallelism: false,
  },
});
