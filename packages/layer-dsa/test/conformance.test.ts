// The conformance kit of @metrale/core on the CPU reference backend: replay ≡ eager, failed
// capture → re-arm → eager ≡ never captured, verify k + accept n ≡ n decodes, rejected rows leave
// no trace, slot reuse, and the room check of the host-tracked caches (which must run: 'pass').
// On the f32 path, on the bf16 one (bf16 rows, Linear weights, row-typed scratch and MLA cache),
// and with block-FP8 weights as GLM-5-FP8 ships them.
import { CpuBackend } from '@metrale/cpu-backend';
import type { HostTensor, MetralePlugin } from '@metrale/core';
import { runLayerConformance } from '@metrale/core/testing';
import plugin from '@metrale/layer-dsa';
import { describe, expect, it } from 'vitest';
import { configOf, GLM5, GLM5_MID, GLM53, pluginIn, randomWeights, weightsOf, type Shape } from './dsa-setup.js';
import { GLM5_FP8_LINEARS, quantizeTensors } from './fp8-weights.js';

interface Run {
  readonly plugin?: MetralePlugin;
  readonly rowDtype?: 'f32' | 'bf16';
  readonly tensors?: HostTensor[];
}

function conformance(shape: Shape, extra: Record<string, unknown>, k: number, seed: number, run: Run = {}) {
  const report = runLayerConformance(run.plugin ?? plugin, {
    backend: () => new CpuBackend(),
    config: configOf(shape, extra),
    weights: weightsOf(run.tensors ?? randomWeights(shape, seed).tensors, 'conformance weights'),
    k,
    rowDtype: run.rowDtype ?? 'f32',
  });
  return Object.fromEntries(report.checks.map((c) => [c.check, c.status]));
}

const BF16 = { plugin: pluginIn({ rows: 'bf16', fp8Weights: false }), rowDtype: 'bf16' } as const;
const FP8 = { plugin: pluginIn({ rows: 'bf16', fp8Weights: true }), rowDtype: 'bf16' } as const;
/** The shape's random weights with GLM-5-FP8's Linear weights (and `more`) as block-FP8. */
const fp8Weights = (shape: Shape, seed: number, more: string[] = []) =>
  quantizeTensors(randomWeights(shape, seed).tensors, [...GLM5_FP8_LINEARS, ...more]).fp8;

const MUST_PASS = [
  'default-hooks', 'replay-equals-eager', 'failed-capture-rearm', 'verify-accept-equals-decode',
  'rejected-rows-leave-no-trace', 'slot-reuse-starts-clean', 'room-check-before-write', 'prefix-resume-equals-prefill',
];

describe('@metrale/layer-dsa conformance on the CPU reference backend', () => {
  it('GLM-5 layer, default caches (bf16 indexer keys): every check passes, the room check included', () => {
    const status = conformance(GLM5, { metrale_indexer_cache_dtype: undefined }, 3, 3);
    for (const check of MUST_PASS) expect(status[check], check).toBe('pass');
    expect(status['carried-equals-write-on-accept']).toBe('n/a');
  });

  it('GLM-5.3 layer (pools of 4, ring of recent keys) at k = 4', () => {
    const status = conformance(GLM53, {}, 4, 4);
    for (const check of MUST_PASS) expect(status[check], check).toBe('pass');
  });

  it('fp8 indexer keys and a bf16 MLA cache', () => {
    const status = conformance(GLM5, { metrale_indexer_cache_dtype: 'fp8', metrale_kv_cache_dtype: 'bf16' }, 3, 5);
    for (const check of MUST_PASS) expect(status[check], check).toBe('pass');
  });

  it('bf16 rows: GLM-5 with bf16 indexer keys (and the MLA cache bf16 by default)', () => {
    const status = conformance(GLM5, { metrale_indexer_cache_dtype: 'bf16' }, 3, 6, BF16);
    for (const check of MUST_PASS) expect(status[check], check).toBe('pass');
  });

  it('bf16 rows: GLM-5.3 at k = 4, fp8 indexer keys', () => {
    const status = conformance(GLM53, { metrale_indexer_cache_dtype: 'fp8' }, 4, 7, BF16);
    for (const check of MUST_PASS) expect(status[check], check).toBe('pass');
  });

  it('FP8 weights with bf16 rows: GLM-5 whose FP8 parts stack and split on 128-row blocks, weights_proj bf16', () => {
    const status = conformance(GLM5_MID, { metrale_indexer_cache_dtype: 'bf16' }, 3, 8, { ...FP8, tensors: fp8Weights(GLM5_MID, 8) });
    for (const check of MUST_PASS) expect(status[check], check).toBe('pass');
  });

  it('FP8 weights with bf16 rows: GLM-5.3 with an FP8 pool gate after the bf16 weights_proj', () => {
    const tensors = fp8Weights(GLM53, 9, ['indexer.index_kpool_compress_gate']);
    const status = conformance(GLM53, { metrale_indexer_cache_dtype: 'bf16' }, 4, 9, { ...FP8, tensors });
    for (const check of MUST_PASS) expect(status[check], check).toBe('pass');
  });
});
