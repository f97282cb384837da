import { MemoryWeightSource, SeededRandom } from '@metrale/core';
import { CpuBackend } from '@metrale/cpu-backend';
import plugin, { GdnLayer, readGdnConfig } from '@metrale/layer-gdn';
import { describe, expect, it } from 'vitest';
import { configOf, randomWeights, Rig, SMALL, splitTensors, type Shape } from './gdn-setup.js';

const limits = { maxSeqs: 2, maxSeqLen: 128, maxBatch: 2, maxK: 3, maxRows: 24 };

/** Prefill, decodes and a partly accepted verify; every output row, in order. */
function outputsOf(shape: Shape, tensors: ReturnType<typeof randomWeights>['tensors'], config: Record<string, unknown>): { out: Float32Array[]; layout: string } {
  const rig = new Rig(config, tensors, limits);
  const rnd = new SeededRandom(4);
  const W = shape.hidden;
  try {
    const seqs = [rig.driver.open(), rig.driver.open()];
    const out = [
      rig.prefill(seqs, [30, 2], rnd.normals(32 * W)),
      rig.decode(seqs, rnd.normals(2 * W)),
      rig.verify(seqs, 3, rnd.normals(6 * W), [2, 1]),
      rig.decode(seqs, rnd.normals(2 * W)),
    ];
    return { out, layout: (rig.layer as GdnLayer).weightLayout };
  } finally {
    rig.dispose();
  }
}

describe('Qwen3.5 split projections', () => {
  for (const shape of [SMALL, { ...SMALL, hk: 1, hv: 4 }, { ...SMALL, hk: 4, hv: 4, dk: 3 }]) {
    it(`give outputs identical to the fused layout (H_k ${shape.hk}, H_v ${shape.hv})`, () => {
      const { tensors } = randomWeights(shape, 8);
      const fused = outputsOf(shape, tensors, configOf(shape));
      // A Qwen3.5 multimodal config nests the text config.
      const nested = { model_type: 'qwen3_5', text_config: { ...configOf(shape), model_type: 'qwen3_5_text' } };
      const split = outputsOf(shape, splitTensors(shape, tensors), nested);
      expect(fused.layout).toBe('qwen3_next');
      expect(split.layout).toBe('qwen3_5');
      split.out.forEach((o, i) => expect(Array.from(o), `step ${i}`).toEqual(Array.from(fused.out[i]!)));
    });
  }
});

describe('readGdnConfig', () => {
  it('reads a qwen3_next config and the derived sizes', () => {
    const cfg = readGdnConfig(configOf({ hidden: 2048, hk: 16, hv: 32, dk: 128, dv: 128, K: 4 }));
    expect(cfg).toMatchObject({ hidden: 2048, hk: 16, hv: 32, dk: 128, dv: 128, convK: 4, r: 2, convDim: 8192, qkvzDim: 12288, valueDim: 4096 });
  });

  it('reads the text_config of a qwen3_5 config and accepts swish', () => {
    const cfg = readGdnConfig({ model_type: 'qwen3_5', text_config: { ...configOf(SMALL), model_type: 'qwen3_5_text', hidden_act: 'swish' } });
    expect(cfg.hv).toBe(SMALL.hv);
  });

  it('checks layer_types when given a layer index', () => {
    const config = configOf(SMALL, { layer_types: ['linear_attention', 'full_attention'] });
    expect(readGdnConfig(config, 0).hk).toBe(SMALL.hk);
    expect(() => readGdnConfig(config, 1)).toThrow(/layer_types\[1\] is "full_attention"/);
  });

  it('loads through the plugin with a prefix-free weight source', () => {
    const { tensors } = randomWeights(SMALL, 2);
    const rig = new Rig(configOf(SMALL), tensors, limits);
    expect(rig.layer.type).toBe('gdn');
    expect(rig.layer.inputRowBytes).toBe(4 * SMALL.hidden);
    rig.dispose();
    expect(new MemoryWeightSource('x', tensors).has('in_proj_qkvz.weight')).toBe(true);
  });
});

describe('device memory', () => {
  it('dispose frees every allocation of the layer', () => {
    const gpu = new CpuBackend();
    const before = gpu.stats().liveAllocations;
    const layer = plugin.create({ gpu, layerType: 'gdn', config: configOf(SMALL), layerIndex: 0, weights: new MemoryWeightSource('w', randomWeights(SMALL).tensors), limits });
    expect(gpu.stats().liveAllocations).toBeGreaterThan(before);
    layer.dispose();
    layer.dispose();
    expect(gpu.stats().liveAllocations).toBe(before);
    expect(() => layer.openState(0)).toThrow(/disposed/);
    gpu.dispose();
  });
});
