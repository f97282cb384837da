// The golden fixtures on CUDA (the GPU lane: vitest.gpu.config.ts). Same fixtures and runner as
// test/fixtures.test.ts, on CudaBackend, at case.json's tolerance (rows are f32; the MLA cache is
// f32 by default and the indexer's bf16 keys only decide the selection, which the generator made
// robust to bf16 rounding). Without a GPU it skips and says why.
import { basename } from 'node:path';
import { PluginRegistry, readLayerFixture, runLayerFixture } from '@metrale/core';
import plugin from '@metrale/layer-dsa';
import { describe, expect, it } from 'vitest';
import { fixtureDirs, MISSING_FIXTURES, stepsOver, summaryLine } from '../fixture-dirs.js';
import { chooseDevice } from './device.js';

const cuda = await chooseDevice();
if (!cuda.available) console.warn(`[layer-dsa gpu] golden fixtures skipped: ${cuda.reason}`);

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
      const gpu = cuda.create();
      try {
        const report = runLayerFixture(fixture, {
          registry, gpu, onStep: (s) => console.log(JSON.stringify({ fixture: basename(dir), ...s })),
        });
        console.log(summaryLine(report, report.tolerance));
        const failed = report.steps.filter((s) => s.path === 'capture-failed');
        if (failed.length > 0) {
          console.warn(`[layer-dsa gpu] ${basename(dir)}: graph capture failed (ran eagerly) at steps ` +
            failed.map((s) => `${s.step}: ${s.captureError ?? 'no reason given'}`).join('; '));
        }
        expect(stepsOver(report, report.tolerance)).toEqual([]);
        expect(report.steps).toHaveLength(fixture.steps.length);
      } finally {
        gpu.dispose();
      }
    });
  }
});
