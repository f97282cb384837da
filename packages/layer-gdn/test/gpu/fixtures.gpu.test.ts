// The golden fixtures on CUDA (the GPU lane: vitest.gpu.config.ts, `npm run test:gpu` at the
// root). Same fixtures and runner as test/fixtures.test.ts, on CudaBackend: the f32 path at
// case.json's tolerance, and the layer with bf16 rows (bf16 weights, and the fixture's weights as a
// block-FP8 checkpoint) at FIXTURE_BOUNDS, as test/precision.test.ts holds them on the CPU; the
// figures are printed either way. Without a GPU it skips and says why.
import { basename } from 'node:path';
import { checkLayerFixture, fixtureDirectories } from '@metrale/core/testing';
import { CudaBackend, probe } from '@metrale/cuda-backend';
import plugin from '@metrale/layer-gdn';
import { describe, expect, it } from 'vitest';
import { BF16, FIXTURE_BOUNDS, FP8, fp8Source, withPrecision } from '../precision-setup.js';

const cuda = probe();
if (!cuda.available) console.warn(`[layer-gdn gpu] golden fixtures skipped: ${cuda.reason}`);

const fixtures = fixtureDirectories(new URL('../../fixtures', import.meta.url), {
  envVar: 'METRALE_GDN_FIXTURES_DIR', generator: 'tools/fixtures/gdn.py', out: 'packages/layer-gdn/fixtures',
});

const MODES = [
  { mode: 'f32', plugin, bound: undefined },
  { mode: 'bf16', plugin: withPrecision(plugin, BF16), bound: FIXTURE_BOUNDS.bf16 },
  { mode: 'block-FP8 weights, bf16 rows', plugin: withPrecision(plugin, FP8, fp8Source), bound: FIXTURE_BOUNDS.fp8 },
] as const;

describe.skipIf(!cuda.available)('golden fixtures from Hugging Face on CUDA', () => {
  it('has fixtures to check', () => {
    expect(fixtures.dirs.length, fixtures.missing).toBeGreaterThan(0);
  });

  for (const dir of fixtures.dirs) {
    for (const m of MODES) {
      it(`${basename(dir)} (${m.mode}): every step matches the Hugging Face module`, () => {
        const { fixture, runs } = checkLayerFixture(dir, {
          plugins: [m.plugin],
          backend: () => CudaBackend.create(),
          bound: (report) => m.bound ?? report.tolerance,
          print: 'steps',
          label: '[layer-gdn gpu]',
        });
        for (const { report, over } of runs) {
          expect(report.rowFormat.output).toBe(m.bound === undefined ? 'f32' : 'bf16');
          expect(over).toEqual([]);
          expect(report.steps).toHaveLength(fixture.steps.length);
        }
      });
    }
  }
});
