// The repository-wide checks under scripts/ (`npm run test:repo`, part of `npm test`).
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  root: fileURLToPath(new URL('.', import.meta.url)),
  test: { include: ['*.test.mjs'] },
});
