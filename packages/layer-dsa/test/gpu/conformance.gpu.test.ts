// The conformance kit on CUDA, for both variants and every cache format, with the CUDA kernels.
import { runLayerConformance } from '@metrale/core/testing';
import plugin from '@metrale/layer-dsa';
import { describe, expect, it } from 'vitest';
import { configOf, GLM5, GLM53, randomWeights, weightsOf, type Shape } from '../dsa-setup.js';
import { chooseDevice } from './device.js';

const cuda = await chooseDevice();
if (!cuda.available) console.warn(`[layer-dsa gpu] conformance skipped: ${cuda.reason}`);

const CASES: [string, Shape, Record<string, unknown>, number][] = [
  ['GLM-5, bf16 indexer keys', GLM5, { metrale_indexer_cache_dtype: 'bf16' }, 3],
  ['GLM-5, fp8 indexer keys, bf16 MLA cache', GLM5, { metrale_indexer_cache_dtype: 'fp8', metrale_kv_cache_dtype: 'bf16' }, 3],
  ['GLM-5.3, pools of 4', GLM53, { metrale_indexer_cache_dtype: 'bf16' }, 4],
];

describe.skipIf(!cuda.available)('@metrale/layer-dsa conformance on CUDA', () => {
  for (const [name, shape, extra, k] of CASES) {
    it(`${name}: every check of the kit passes, the room check included`, () => {
      const report = runLayerConformance(plugin, {
        backend: cuda.create, config: configOf(shape, extra), weights: weightsOf(randomWeights(shape, 3).tensors), k, tolerance: 1e-4,
      });
      console.log(report.checks.map((c) => `${c.check}: ${c.status} — ${c.detail}`).join('\n'));
      expect(report.passed).toBe(true);
      expect(report.checks.find((c) => c.check === 'room-check-before-write')?.status).toBe('pass');
    });
  }
});
