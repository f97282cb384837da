import { MemoryWeightSource } from '@metrale/core';
import { CpuBackend } from '@metrale/cpu-backend';
import plugin, { GdnLayer } from '@metrale/layer-gdn';
import { describe, expect, it } from 'vitest';
import { configOf, randomWeights } from './gdn-setup.js';

describe('speculative scratch at the Qwen3-Next-80B shape', () => {
  it('is H_v·k·(d_k+d_v+1)·4 B = 131 584 B per sequence per layer, against k × 2 MiB of per-position states', () => {
    // The real head shape (H_k 16, H_v 32, d_k = d_v = 128, K 4); a small hidden size keeps the
    // projections small, and the stash does not depend on it.
    const shape = { hidden: 8, hk: 16, hv: 32, dk: 128, dv: 128, K: 4 };
    const gpu = new CpuBackend();
    const k = 4;
    const layer = plugin.create({
      gpu, layerType: 'gdn', config: configOf(shape), layerIndex: 0,
      weights: new MemoryWeightSource('80b-shape', randomWeights(shape, 1).tensors),
      limits: { maxSeqs: 1, maxSeqLen: 16, maxBatch: 1, maxK: k, maxRows: 4 },
    }) as GdnLayer;
    try {
      const stashBytes = layer.gdnWoaStashSeqFloats() * 4;
      expect(stashBytes).toBe(32 * 4 * 257 * 4);
      expect(stashBytes).toBe(131_584);
      const stateBytes = layer.stateSeqFloats * 4;
      expect(stateBytes).toBe(2 * 1024 * 1024);
      expect(stashBytes / (k * stateBytes)).toBeLessThan(0.016);
      // Carried mode adds the conv stash: a ring of 2·maxK rows of conv_dim f32.
      expect(layer.gdnCarrySeqFloats()).toEqual({ stashSeqFloats: 32 * 4 * 257, convRowElems: 2 * 16 * 128 + 32 * 128, convStashRows: 2 * k });
    } finally {
      layer.dispose();
      gpu.dispose();
    }
  });
});
