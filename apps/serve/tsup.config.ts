import { defineConfig } from 'tsup';

export default defineConfig({
  // index: the programmatic API; cli: the `metrale` executable (bin), which keeps its shebang.
  entry: ['src/index.ts', 'src/cli.ts'],
  format: ['esm'],
  dts: true,
  sourcemap: true,
  clean: true,
  target: 'node20',
});
