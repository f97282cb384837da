import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

const here = (p: string) => fileURLToPath(new URL(p, import.meta.url));

export default defineConfig({
  resolve: {
    // The CPU backend depends on core, so core cannot depend on it (a cycle turbo refuses). Its
    // tests read the backend's sources instead, and both see one copy of core: these sources.
    alias: [
      { find: /^@metrale\/cpu-backend$/, replacement: here('../cpu-backend/src/index.ts') },
      { find: /^@metrale\/core\/testing$/, replacement: here('./src/testing/index.ts') },
      { find: /^@metrale\/core$/, replacement: here('./src/index.ts') },
    ],
  },
  test: {
    include: ['test/**/*.test.ts'],
    exclude: ['test/gpu/**'],
    testTimeout: 120_000,
  },
});
