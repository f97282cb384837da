// The golden fixtures on CUDA (the GPU lane): the same fixtures and runner as test/fixtures.test.ts,
// on CudaBackend, at case.json's tolerance (the layer computes in f32), with the default slot cache
// and with the smallest one the fixture allows. Prints one JSON line per step and a summary line
// per fixture, as `metrale check-layer --backend cuda` does. Without a GPU it skips and says why.
import { basename } from 'node:path';
import { PluginRegistry, fixtureLimits, readLayerFixture, runLayerFixture } from '@metrale/core';
import type { GpuBackend } from '@metrale/core';
import plugin, { plePlugin } from '@metrale/layer-ple';
import { beforeAll, describe, expect, it } from 'vitest';
import { fixtureDirs, MISSING_FIXTURES, stepsOver, summaryLine } from '../fixture-dirs.js';
import { cudaAvailable, ensureFatbins } from './cuda-setup.js';

const cuda = await cudaAvailable();
if (!cuda.available) console.warn(`[layer-ple gpu] golden fixtures skipped: ${cuda.reason}`);

const dirs = fixtureDirs();
let create: () => GpuBackend;

describe.skipIf(!cuda.available)('golden fixtures from Hugging Face on CUDA', () => {
  beforeAll(async () => {
    ensureFatbins();
    create = cuda.create!;
  });

  it('has fixtures to check', () => {
    expect(dirs.length, MISSING_FIXTURES).toBeGreaterThan(0);
  });

  for (const dir of dirs) {
    it(`${basename(dir)}: every step matches the Hugging Face module`, () => {
      const fixture = readLayerFixture(dir);
      const limits = fixtureLimits(fixture);
      for (const p of [plugin, plePlugin({ slotCapacity: limits.maxBatch * limits.maxK })]) {
        const registry = new PluginRegistry();
        registry.register(p);
        const gpu = create();
        try {
          const report = runLayerFixture(fixture, { registry, gpu, onStep: (s) => console.log(JSON.stringify({ fixture: basename(dir), ...s })) });
          console.log(summaryLine(report, report.tolerance));
          const failed = report.steps.filter((s) => s.path === 'capture-failed');
          if (failed.length) console.warn(`[layer-ple gpu] ${basename(dir)}: capture failed at ${failed.map((s) => `${s.step}: ${s.captureError}`).join('; ')}`);
          expect(stepsOver(report, report.tolerance)).toEqual([]);
          expect(report.steps).toHaveLength(fixture.steps.length);
          expect(report.steps.some((s) => s.path === 'replay')).toBe(true);
        } finally {
          gpu.dispose();
        }
      }
    });
  }
});
