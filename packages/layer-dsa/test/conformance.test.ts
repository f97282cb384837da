// The conformance kit of @metrale/core on the CPU reference backend: replay ≡ eager, failed
// capture → re-arm → eager ≡ never captured, verify k + accept n ≡ n decodes, rejected rows leave
// no trace, slot reuse, and the room check of the host-tracked caches (which must run: 'pass').
import { CpuBackend } from '@metrale/cpu-backend';
import { runLayerConformance } from '@metrale/core/testing';
import plugin from '@metrale/layer-dsa';
import { describe, expect, it } from 'vitest';
import { configOf, GLM5, GLM53, randomWeights, weightsOf, type Shape } from './dsa-setup.js';

function conformance(shape: Shape, extra: Record<string, unknown>, k: number, seed: number) {
  const report = runLayerConformance(plugin, {
    backend: () => new CpuBackend(),
    config: configOf(shape, extra),
    weights: weightsOf(randomWeights(shape, seed).tensors, 'conformance weights'),
    k,
  });
  return Object.fromEntries(report.checks.map((c) => [c.check, c.status]));
}

const MUST_PASS = [
  'default-hooks', 'replay-equals-eager', 'failed-capture-rearm', 'verify-accept-equals-decode',
  'rejected-rows-leave-no-trace', 'slot-reuse-starts-clean', 'room-check-before-write',
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
});
