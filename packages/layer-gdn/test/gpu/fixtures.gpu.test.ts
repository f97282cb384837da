// The golden fixtures on CUDA (the GPU lane: vitest.gpu.config.ts, `npm run test:gpu` at the
// root). Same fixtures and runner as test/fixtures.test.ts, on CudaBackend. The bound is
// case.json's tolerance, unless the layer keeps its rows in bf16: then BF16_BOUND, as
// docs/fixtures.md allows; the figures are printed either way. Without a GPU it skips and says why.
import { basename } from 'node:path';
import { checkLayerFixture, fixtureDirectories } from '@metrale/core/testing';
import { CudaBackend, probe } from '@metrale/cuda-backend';
import plugin from '@metrale/layer-gdn';
import { describe, expect, it } from 'vitest';

/** The bound for a layer that computes in bf16 (docs/layers/gdn.md: around 1e-2). */
const BF16_BOUND = 1e-2;

const cuda = probe();
if (!cuda.available) console.warn(`[layer-gdn gpu] golden fixtures skipped: ${cuda.reason}`);

const fixtures = fixtureDirectories(new URL('../../fixtures', import.meta.url), {
  envVar: 'METRALE_GDN_FIXTURES_DIR', generator: 'tools/fixtures/gdn.py', out: 'packages/layer-gdn/fixtures',
});

describe.skipIf(!cuda.available)('golden fixtures from Hugging Face on CUDA', () => {
  it('has fixtures to check', () => {
    expect(fixtures.dirs.length, fixtures.missing).toBeGreaterThan(0);
  });

  for (const dir of fixtures.dirs) {
    it(`${basename(dir)}: every step matches the Hugging Face module`, () => {
      const { fixture, runs } = checkLayerFixture(dir, {
        plugins: [plugin],
        backend: () => CudaBackend.create(),
        bound: (report) => {
          const bf16 = report.rowFormat.input === 'bf16' || report.rowFormat.output === 'bf16';
          return bf16 ? Math.max(BF16_BOUND, report.tolerance) : report.tolerance;
        },
        print: 'steps',
        label: '[layer-gdn gpu]',
      });
      for (const { report, over } of runs) {
        expect(over).toEqual([]);
        expect(report.steps).toHaveLength(fixture.steps.length);
      }
    });
  }
});
