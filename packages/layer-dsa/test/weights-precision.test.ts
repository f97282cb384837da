// How a DSA layer holds its weights in each precision: one stacked f32 (or bf16) weight per
// projection; FP8 parts as the checkpoint ships them, stacked where whole 128-row blocks allow and
// split into GEMMs of their own where a part ends inside a block or changes type; kv_b_proj in the
// rows' type (dequantized once when FP8); and the refusals.
import { CpuBackend } from '@metrale/cpu-backend';
import {
  F32_PRECISION, InvalidArgumentError, WeightsError, linearToF32, roundTo, tensorOf,
  type HostLinear, type HostTensor, type Precision,
} from '@metrale/core';
import plugin, { dsaGeometry, loadDsaWeights, readDsaConfig, segmentLinears } from '@metrale/layer-dsa';
import { describe, expect, it } from 'vitest';
import { configOf, GLM5, GLM5_MID, GLM53, randomWeights, weightsOf, type Shape } from './dsa-setup.js';
import { GLM5_FP8_LINEARS, quantizeTensors } from './fp8-weights.js';

const BF16: Precision = { rows: 'bf16', fp8Weights: false };
const FP8: Precision = { rows: 'bf16', fp8Weights: true };
const limits = { maxSeqs: 2, maxSeqLen: 32, maxBatch: 2, maxK: 2, maxRows: 32 };

const load = (shape: Shape, tensors: HostTensor[], precision: Precision) =>
  loadDsaWeights(weightsOf(tensors), readDsaConfig(configOf(shape), 0, precision.rows), precision);
const layout = (segments: readonly { column: number; weight: HostLinear }[]) => segments.map((s) => [s.column, s.weight.dtype, s.weight.rows]);

describe('Linear weights per precision', () => {
  it('f32: one stacked f32 weight per projection, as before', () => {
    const w = load(GLM5, randomWeights(GLM5, 1).tensors, F32_PRECISION);
    const geo = dsaGeometry(readDsaConfig(configOf(GLM5), 0));
    expect(layout(w.wa)).toEqual([[0, 'f32', geo.xaWidth]]);
    expect(layout(w.wb)).toEqual([[0, 'f32', geo.qbWidth]]);
    expect([w.kvb.dtype, w.wo.dtype]).toEqual(['f32', 'f32']);
  });

  it('bf16: the same stacks in bf16, values rounded to nearest even', () => {
    const { tensors, ref } = randomWeights(GLM5, 2);
    const w = load(GLM5, tensors, BF16);
    expect(layout(w.wa).map((s) => s[1])).toEqual(['bf16']);
    expect(w.kvb.dtype).toBe('bf16');
    expect([...linearToF32(w.kvb)]).toEqual([...ref.get('kv_b_proj.weight')!].map((v) => roundTo('bf16', v)));
  });

  it('FP8 (GLM-5-FP8 layout): stacked on whole blocks, split where a part ends inside one or is bf16', () => {
    const { fp8, dequantized } = quantizeTensors(randomWeights(GLM5_MID, 3).tensors, [...GLM5_FP8_LINEARS]);
    const w = load(GLM5_MID, fp8, FP8);
    const { qLora, kvLora, rope, dI, idxHeads, heads, nope } = GLM5_MID;
    // q_a (one whole block) + kv_a; wk after kv_a's partial block; weights_proj bf16.
    expect(layout(w.wa)).toEqual([[0, 'f8e4m3', qLora + kvLora + rope], [qLora + kvLora + rope, 'f8e4m3', dI], [qLora + kvLora + rope + dI, 'bf16', idxHeads]]);
    // q_b (48 rows, a partial block), then wq_b.
    expect(layout(w.wb)).toEqual([[0, 'f8e4m3', heads * (nope + rope)], [heads * (nope + rope), 'f8e4m3', idxHeads * dI]]);
    expect(w.wo.dtype).toBe('f8e4m3');
    // kv_b_proj: the dequantized values, rounded to bf16 once.
    const kvb = dequantized.find((t) => t.name === 'kv_b_proj.weight')!;
    expect(w.kvb.dtype).toBe('bf16');
    expect([...linearToF32(w.kvb)]).toEqual([...new Float32Array(kvb.data.slice().buffer)].map((v) => roundTo('bf16', v)));
    // The stacked FP8 weight holds both parts' codes and block scales.
    expect(w.wa[0]!.weight.scales!.length).toBe(2 * 2);
  });

  it('FP8 checkpoint on a bf16 (or f32) data path: every weight dequantized into the rows type', () => {
    const { fp8 } = quantizeTensors(randomWeights(GLM5_MID, 4).tensors, [...GLM5_FP8_LINEARS]);
    for (const precision of [BF16, F32_PRECISION]) {
      const w = load(GLM5_MID, fp8, precision);
      expect(layout(w.wa).map((s) => s[1])).toEqual([precision.rows]);
      expect(layout(w.wb).map((s) => s[1])).toEqual([precision.rows]);
    }
  });

  it('segmentLinears: a type change or a partial FP8 block ends a stack', () => {
    const part = (name: string, rows: number, dtype: HostLinear['dtype']): HostLinear => ({
      name, rows, cols: 4, dtype, data: new Uint8Array(rows * 4 * (dtype === 'f8e4m3' ? 1 : 2)), ...(dtype === 'f8e4m3' ? { scales: new Float32Array(Math.ceil(rows / 128)) } : {}),
    });
    const segs = segmentLinears([part('a', 256, 'f8e4m3'), part('b', 130, 'f8e4m3'), part('c', 5, 'f8e4m3'), part('d', 3, 'bf16'), part('e', 7, 'bf16')], 'x');
    expect(layout(segs)).toEqual([[0, 'f8e4m3', 386], [386, 'f8e4m3', 5], [391, 'bf16', 10]]);
  });
});

describe('the layer in each precision', () => {
  const create = (precision: Precision, tensors: HostTensor[], shape: Shape = GLM5, extra: Record<string, unknown> = {}) => {
    const gpu = new CpuBackend();
    try {
      const layer = plugin.create({ gpu, layerType: 'dsa', config: configOf(shape, extra), layerIndex: 0, weights: weightsOf(tensors), limits, precision });
      const bytes = gpu.stats().liveBytes;
      layer.dispose();
      return { layer, bytes };
    } finally {
      gpu.dispose();
    }
  };

  it('rows of bf16 in and out; the MLA cache defaults to bf16 with bf16 rows, f32 on the f32 path, and a config choice wins', () => {
    const tensors = randomWeights(GLM5, 5).tensors;
    const bf16 = create(BF16, tensors).layer as unknown as { inputRowBytes: number; outputRowBytes: number; config: { kvCacheDtype: string } };
    expect([bf16.inputRowBytes, bf16.outputRowBytes]).toEqual([2 * GLM5.hidden, 2 * GLM5.hidden]);
    expect(bf16.config.kvCacheDtype).toBe('bf16');
    const f32 = create(F32_PRECISION, tensors).layer as unknown as { inputRowBytes: number; config: { kvCacheDtype: string } };
    expect([f32.inputRowBytes, f32.config.kvCacheDtype]).toEqual([4 * GLM5.hidden, 'f32']);
    const chosen = create(BF16, tensors, GLM5, { metrale_kv_cache_dtype: 'f32' }).layer as unknown as { config: { kvCacheDtype: string } };
    expect(chosen.config.kvCacheDtype).toBe('f32');
  });

  it('FP8 weights stay FP8 on the device: the layer takes less memory than with the same weights in bf16', () => {
    const { fp8 } = quantizeTensors(randomWeights(GLM5_MID, 6).tensors, [...GLM5_FP8_LINEARS]);
    expect(create(FP8, fp8, GLM5_MID).bytes).toBeLessThan(create(BF16, fp8, GLM5_MID).bytes);
  });

  it('refuses FP8 weights with f32 rows, and an FP8 tensor without its block scales, before any device work', () => {
    const { fp8 } = quantizeTensors(randomWeights(GLM53, 7).tensors, [...GLM5_FP8_LINEARS]);
    expect(() => create({ rows: 'f32', fp8Weights: true }, fp8, GLM53)).toThrow(InvalidArgumentError);
    expect(() => create({ rows: 'f32', fp8Weights: true }, fp8, GLM53)).toThrow(/FP8 weights multiply bf16 or f16 rows/);
    const noScales = fp8.filter((t) => t.name !== 'o_proj.weight_scale_inv');
    expect(() => create(FP8, noScales, GLM53)).toThrow(WeightsError);
    expect(() => create(FP8, noScales, GLM53)).toThrow(/missing tensor 'o_proj\.weight_scale_inv'/);
  });

  it('refuses an FP8 norm weight (checkpoints keep norms unquantized)', () => {
    const tensors = randomWeights(GLM5, 8).tensors.map((t) =>
      t.name === 'q_a_layernorm.weight' ? { ...t, dtype: 'f8e4m3' as const, data: new Uint8Array(GLM5.qLora) } : t);
    expect(() => create(BF16, tensors)).toThrow(/tensor 'q_a_layernorm\.weight' is f8e4m3; expected bf16, f16 or f32/);
  });

  it('reads bf16 checkpoint tensors as they are on the bf16 path', () => {
    const tensors = randomWeights(GLM5, 9).tensors.map((t) => {
      if (t.shape.length !== 2) return t;
      const v = new Float32Array(t.data.slice().buffer);
      return tensorOf(t.name, Uint16Array.from(v, (x) => new Uint16Array(new Float32Array([x]).buffer)[1]!), t.shape, 'bf16');
    });
    const w = load(GLM5, tensors, BF16);
    const wo = tensors.find((t) => t.name === 'o_proj.weight')!;
    expect([...w.wo.data]).toEqual([...wo.data]);
  });
});
