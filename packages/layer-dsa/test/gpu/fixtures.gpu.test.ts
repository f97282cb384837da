// The golden fixtures on CUDA (the GPU lane: vitest.gpu.config.ts). Same fixtures and runner as
// test/fixtures.test.ts, on CudaBackend, at case.json's tolerance (rows are f32; the MLA cache is
// f32 by default and the indexer's bf16 keys only decide the selection, which the generator made
// robust to bf16 rounding). Then each fixture on the bf16 data path and with FP8 weights, against
// f32, row by row with selection flips told apart, at the CPU lane's bounds
// (test/precision-compare.ts). Without a GPU it skips and says why.
import { basename } from 'node:path';
import { readLayerFixture } from '@metrale/core';
import { checkLayerFixture, fixtureDirectories } from '@metrale/core/testing';
import plugin from '@metrale/layer-dsa';
import { describe, expect, it } from 'vitest';
import { checkPrecisions } from '../precision-compare.js';
import { chooseDevice } from './device.js';

const cuda = await chooseDevice();
if (!cuda.available) console.warn(`[layer-dsa gpu] golden fixtures skipped: ${cuda.reason}`);

const fixtures = fixtureDirectories(new URL('../../fixtures', import.meta.url), {
  envVar: 'METRALE_DSA_FIXTURES_DIR', generator: 'tools/fixtures/dsa.py', out: 'packages/layer-dsa/fixtures',
});

describe.skipIf(!cuda.available)('golden fixtures from Hugging Face on CUDA', () => {
  it('has fixtures to check', () => {
    expect(fixtures.dirs.length, fixtures.missing).toBeGreaterThan(0);
  });

  for (const dir of fixtures.dirs) {
    it(`${basename(dir)}: every step matches the Hugging Face module`, () => {
      const { fixture, runs } = checkLayerFixture(dir, {
        plugins: [plugin], backend: () => cuda.create(), print: 'steps', label: '[layer-dsa gpu]',
      });
      for (const { report, over } of runs) {
        expect(over).toEqual([]);
        expect(report.steps).toHaveLength(fixture.steps.length);
      }
    });
  }
});

describe.skipIf(!cuda.available)('golden fixtures on CUDA in bf16 and with FP8 weights, against f32', () => {
  for (const dir of fixtures.dirs) {
    const name = basename(dir);
    it(`${name}: within bf16 rounding of f32 on every row that selects as f32 does`, () => {
      checkPrecisions(readLayerFixture(dir), name, () => cuda.create(), 'cuda');
    });
  }
});
