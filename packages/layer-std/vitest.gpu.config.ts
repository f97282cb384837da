import { defineConfig } from 'vitest/config';

// The GPU lane: `npm run test:gpu` here (or `node scripts/test-gpu.mjs` at the root). Without a
// GPU every suite skips and says why. Kernels come from dist/kernels/ (`npm run build` first).
export default defineConfig({
  test: {
    include: ['test/gpu/**/*.test.ts'],
    testTimeout: 600_000,
    hookTimeout: 120_000,
    // Files in parallel (vitest's default): each makes its own context on the one GPU, and most of
    // a kernel test's time is its CPU twin, which the host's cores share out.
  },
});
