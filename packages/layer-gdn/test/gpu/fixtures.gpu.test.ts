// The golden fixtures on CUDA (the GPU lane: vitest.gpu.config.ts, `npm run test:gpu` at the
// root). Same fixtures and runner as test/fixtures.test.ts, on CudaBackend. The bound is
// case.json's tolerance, unless the layer keeps its rows in bf16: then BF16_BOUND, as
// docs/fixtures.md allows; the figures are printed either way. Without a GPU it skips and says why.
import { basename } from 'node:path';
import { PluginRegistry, readLayerFixture, runLayerFixture } from '@metrale/core';
import { CudaBackend, probe } from '@metrale/cuda-backend';
import plugin from '@metrale/layer-gdn';
import { describe, expect, it } from 'vitest';
import { fixtureDirs, MISSING_FIXTURES, stepsOver, summaryLine } from '../fixture-dirs.js';

/** The bound for a layer that computes in bf16 (docs/layers/gdn.md: around 1e-2). */
const BF16_BOUND = 1e-2;

const cuda = probe();
if (!cuda.available) console.warn(`[layer-gdn gpu] golden fixtures skipped: ${cuda.reason}`);

const dirs = fixtureDirs();

describe.skipIf(!cuda.available)('golden fixtures from Hugging Face on CUDA', () => {
  it('has fixtures to check', () => {
    expect(dirs.length, MISSING_FIXTURES).toBeGreaterThan(0);
  });

  for (const dir of dirs) {
    it(`${basename(dir)}: every step matches the Hugging Face module`, () => {
      const fixture = readLayerFixture(dir);
      const registry = new PluginRegistry();
      registry.register(plugin);
      const gpu = CudaBackend.create();
      try {
        const report = runLayerFixture(fixture, {
          registry,
          gpu,
          onStep: (s) => console.log(JSON.stringify({ fixture: basename(dir), ...s })),
        });
        const bf16 = report.rowFormat.input === 'bf16' || report.rowFormat.output === 'bf16';
        const bound = bf16 ? Math.max(BF16_BOUND, fixture.tolerance.rel) : fixture.tolerance.rel;
        console.log(summaryLine(report, bound));
        const failedCaptures = report.steps.filter((s) => s.path === 'capture-failed');
        if (failedCaptures.length > 0) {
          console.warn(`[layer-gdn gpu] ${basename(dir)}: graph capture failed (ran eagerly) at steps ` +
            failedCaptures.map((s) => `${s.step}: ${s.captureError ?? 'no reason given'}`).join('; '));
        }
        expect(stepsOver(report, bound)).toEqual([]);
        expect(report.steps).toHaveLength(fixture.steps.length);
      } finally {
        gpu.dispose();
      }
    });
  }
});
