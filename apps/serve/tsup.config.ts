import { defineConfig } from 'tsup';

export default defineConfig({
  // index: the programmatic API; cli: the `metrale` executable (bin), which keeps its shebang.
  entry: ['src/index.ts', 'src/cli.ts'],
  format: ['esm'],
  // Types only for the API; the executable has none to offer.
  dts: { entry: 'src/index.ts' },
  sourcemap: true,
  clean: true,
  target: 'node20',
});
