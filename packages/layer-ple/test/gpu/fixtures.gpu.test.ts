// The golden fixtures on CUDA (the GPU lane): the same fixtures and runner as test/fixtures.test.ts,
// on CudaBackend, at case.json's tolerance (the layer computes in f32), with the default slot cache
// and with the smallest one the fixture allows. Prints one JSON line per step and a summary line
// per fixture, as `metrale check-layer --backend cuda` does. Without a GPU it skips and says why.
import { basename } from 'node:path';
import { fixtureLimits } from '@metrale/core';
import type { GpuBackend } from '@metrale/core';
import { checkLayerFixture, fixtureDirectories } from '@metrale/core/testing';
import plugin, { plePlugin } from '@metrale/layer-ple';
import { beforeAll, describe, expect, it } from 'vitest';
import { cudaAvailable, ensureFatbins } from './cuda-setup.js';

const cuda = await cudaAvailable();
if (!cuda.available) console.warn(`[layer-ple gpu] golden fixtures skipped: ${cuda.reason}`);

const fixtures = fixtureDirectories(new URL('../../fixtures', import.meta.url), {
  envVar: 'METRALE_PLE_FIXTURES_DIR', generator: 'tools/fixtures/ple.py', out: 'packages/layer-ple/fixtures',
});
let create: () => GpuBackend;

describe.skipIf(!cuda.available)('golden fixtures from Hugging Face on CUDA', () => {
  beforeAll(async () => {
    ensureFatbins();
    create = cuda.create!;
  });

  it('has fixtures to check', () => {
    expect(fixtures.dirs.length, fixtures.missing).toBeGreaterThan(0);
  });

  for (const dir of fixtures.dirs) {
    it(`${basename(dir)}: every step matches the Hugging Face module`, () => {
      const { fixture, runs } = checkLayerFixture(dir, {
        plugins: (f) => {
          const limits = fixtureLimits(f);
          return [plugin, plePlugin({ slotCapacity: limits.maxBatch * limits.maxK })];
        },
        backend: () => create(),
        print: 'steps',
        label: '[layer-ple gpu]',
      });
      expect(runs).toHaveLength(2);
      for (const { report, over } of runs) {
        expect(over).toEqual([]);
        expect(report.steps).toHaveLength(fixture.steps.length);
        expect(report.steps.some((s) => s.path === 'replay')).toBe(true);
      }
    });
  }
});
