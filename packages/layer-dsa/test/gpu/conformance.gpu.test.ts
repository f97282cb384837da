// The conformance kit on CUDA, for both variants and every cache format, with the CUDA kernels: on
// the f32 path, and on the bf16 one with bf16 and with block-FP8 weights. Paths that must agree
// (decode against verify, replay against eager) can run cuBLASLt GEMMs of different m, whose f32
// sums round differently, and a bf16 output moves by a rounding where they do: bf16 runs are held
// to a bf16-level bound instead of the f32 path's 1e-4.
import type { HostTensor, MetralePlugin } from '@metrale/core';
import { runLayerConformance } from '@metrale/core/testing';
import plugin from '@metrale/layer-dsa';
import { describe, expect, it } from 'vitest';
import { configOf, GLM5, GLM5_MID, GLM53, pluginIn, randomWeights, weightsOf, type Shape } from '../dsa-setup.js';
import { GLM5_FP8_LINEARS, quantizeTensors } from '../fp8-weights.js';
import { chooseDevice } from './device.js';

const cuda = await chooseDevice();
if (!cuda.available) console.warn(`[layer-dsa gpu] conformance skipped: ${cuda.reason}`);

interface Case {
  readonly name: string;
  readonly shape: Shape;
  readonly extra: Record<string, unknown>;
  readonly k: number;
  readonly plugin?: MetralePlugin;
  readonly tensors?: HostTensor[];
}

const BF16 = pluginIn({ rows: 'bf16', fp8Weights: false });
const FP8 = pluginIn({ rows: 'bf16', fp8Weights: true });
const fp8Weights = (shape: Shape, more: string[] = []) => quantizeTensors(randomWeights(shape, 3).tensors, [...GLM5_FP8_LINEARS, ...more]).fp8;

const CASES: Case[] = [
  { name: 'GLM-5, bf16 indexer keys', shape: GLM5, extra: { metrale_indexer_cache_dtype: 'bf16' }, k: 3 },
  { name: 'GLM-5, fp8 indexer keys, bf16 MLA cache', shape: GLM5, extra: { metrale_indexer_cache_dtype: 'fp8', metrale_kv_cache_dtype: 'bf16' }, k: 3 },
  { name: 'GLM-5.3, pools of 4', shape: GLM53, extra: { metrale_indexer_cache_dtype: 'bf16' }, k: 4 },
  { name: 'bf16 rows: GLM-5, bf16 keys and MLA cache', shape: GLM5, extra: { metrale_indexer_cache_dtype: 'bf16' }, k: 3, plugin: BF16 },
  { name: 'bf16 rows: GLM-5.3, fp8 keys', shape: GLM53, extra: { metrale_indexer_cache_dtype: 'fp8' }, k: 4, plugin: BF16 },
  { name: 'FP8 weights, bf16 rows: GLM-5 (128-row blocks)', shape: GLM5_MID, extra: { metrale_indexer_cache_dtype: 'bf16' }, k: 3, plugin: FP8, tensors: fp8Weights(GLM5_MID) },
  {
    name: 'FP8 weights, bf16 rows: GLM-5.3, FP8 pool gate', shape: GLM53, extra: { metrale_indexer_cache_dtype: 'bf16' }, k: 4, plugin: FP8,
    tensors: fp8Weights(GLM53, ['indexer.index_kpool_compress_gate']),
  },
];

describe.skipIf(!cuda.available)('@metrale/layer-dsa conformance on CUDA', () => {
  for (const c of CASES) {
    it(`${c.name}: every check of the kit passes, the room check included`, () => {
      const bf16 = c.plugin !== undefined;
      const report = runLayerConformance(c.plugin ?? plugin, {
        backend: cuda.create, config: configOf(c.shape, c.extra), weights: weightsOf(c.tensors ?? randomWeights(c.shape, 3).tensors), k: c.k,
        rowDtype: bf16 ? 'bf16' : 'f32', tolerance: bf16 ? 1e-2 : 1e-4,
      });
      console.log(report.checks.map((r) => `${r.check}: ${r.status} — ${r.detail}`).join('\n'));
      expect(report.passed).toBe(true);
      expect(report.checks.find((r) => r.check === 'room-check-before-write')?.status).toBe('pass');
      expect(report.checks.find((r) => r.check === 'prefix-resume-equals-prefill')?.status).toBe('pass');
    });
  }
});
