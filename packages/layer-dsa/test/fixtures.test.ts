// The golden fixtures (docs/fixtures.md, metrale-layer-fixture/1) on the CPU reference backend:
// every directory under packages/layer-dsa/fixtures/ (or $METRALE_DSA_FIXTURES_DIR), read by
// core's reader and run through the step driver by core's runner (graphs on), must pass every
// step at case.json's tolerance. No fixtures is a failure, not a pass: they come from
// tools/fixtures/dsa.py (GlmMoeDsaAttention and Glm5NextTextAttention of transformers).
//
// Then the same fixtures on the bf16 data path and with FP8 weights, against f32: bf16 rows (and
// the bf16 MLA cache they default to) against the fixture's expected outputs (HF's module in f32);
// FP8 weights (quantized here as GLM-5-FP8 ships them) with bf16 rows against the f32 path on the
// same dequantized weights, which isolates the data path from the weights' quantization (the FP8
// model's own reference, as tools/fixtures/models.py defines it). bf16 queries and projections
// move indexer scores by about a bf16 rounding, so a row whose k-th and (k+1)-th candidates are
// close can select differently from f32 (min_topk_gap only guarantees selections robust to bf16
// *keys*); such a row attends over another set and is legitimately far from f32. So each row's
// selection is read back: rows that select as f32 does are held to the bf16 bound, flipped rows
// are counted, printed and held only to a loose bound, and must be few (test/precision-compare.ts).
import { basename } from 'node:path';
import { readLayerFixture } from '@metrale/core';
import { checkLayerFixture, fixtureDirectories } from '@metrale/core/testing';
import { CpuBackend } from '@metrale/cpu-backend';
import plugin from '@metrale/layer-dsa';
import { describe, expect, it } from 'vitest';
import { checkPrecisions } from './precision-compare.js';

const fixtures = fixtureDirectories(new URL('../fixtures', import.meta.url), {
  envVar: 'METRALE_DSA_FIXTURES_DIR', generator: 'tools/fixtures/dsa.py', out: 'packages/layer-dsa/fixtures',
});

describe('golden fixtures from Hugging Face on the CPU reference backend', () => {
  it('has fixtures to check', () => {
    expect(fixtures.dirs.length, fixtures.missing).toBeGreaterThan(0);
  });

  for (const dir of fixtures.dirs) {
    it(`${basename(dir)}: every step matches the Hugging Face module`, () => {
      const { fixture, runs } = checkLayerFixture(dir, { plugins: [plugin], backend: () => new CpuBackend() });
      expect(fixture.family).toBe('dsa');
      // The generator guarantees a selection that no tie or rounding can flip (docs/fixtures.md).
      expect(fixture.minTopkGap, 'case.json min_topk_gap').toBeGreaterThanOrEqual(1e-5);
      for (const { report, over } of runs) {
        expect(over).toEqual([]);
        expect(report.steps).toHaveLength(fixture.steps.length);
        expect(report.steps.some((s) => s.path === 'replay')).toBe(true);
        expect(report.pass).toBe(true);
      }
    });
  }
});

describe('golden fixtures on the bf16 data path and with FP8 weights (CPU), against f32', () => {
  for (const dir of fixtures.dirs) {
    const name = basename(dir);
    it(`${name}: within bf16 rounding of f32 on every row that selects as f32 does`, () => {
      checkPrecisions(readLayerFixture(dir), name, () => new CpuBackend(), 'cpu');
    });
  }
});
