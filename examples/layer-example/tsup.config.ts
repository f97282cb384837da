import { defineConfig } from 'tsup';

export default defineConfig({
  entry: ['src/index.ts', 'src/write-tiny-checkpoint.ts'],
  format: ['esm'],
  dts: true,
  sourcemap: true,
  // Everything but dist/kernels: metrale-build-kernels keeps the fatbins that are up to date.
  clean: ['!kernels/**'],
  target: 'node20',
});
