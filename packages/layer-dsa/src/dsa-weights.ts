import {
  F32_PRECISION, WeightsError, expectShape, readFloats, readLinear,
  type HostLinear, type Precision, type WeightSource,
} from '@metrale/core';
import type { DsaConfig } from './dsa-config.js';
import { segmentLinears, type HostLinearSegment } from './dsa-linear-segments.js';

/** One DSA layer's parameters on the host, in the layouts the kernels and GEMMs read (KERNELS.md). */
export interface DsaHostWeights {
  /**
   * The columns of xa: q_a_proj; kv_a_proj_with_mqa; then, for full layers, indexer.wk;
   * indexer.weights_proj; indexer.index_kpool_compress_gate (glm5_next). Stacked into as few
   * weights as their types allow (one on the f32 path).
   */
  readonly wa: readonly HostLinearSegment[];
  /** The columns of qb: q_b_proj; then, for full layers, indexer.wq_b. */
  readonly wb: readonly HostLinearSegment[];
  /** [H·(nope + v)][kvLora]: kv_b_proj in the rows' type, never FP8 (per head: nope rows of W_UK, then v rows of W_UV). */
  readonly kvb: HostLinear;
  /** [D][H·v]: o_proj. */
  readonly wo: HostLinear;
  readonly qaNorm: Float32Array;
  readonly kvaNorm: Float32Array;
  /** indexer.k_norm weight and bias [dI] (full layers; empty otherwise). */
  readonly kNormWeight: Float32Array;
  readonly kNormBias: Float32Array;
  /** indexer.index_kpool_compress_ape [kpool][dI] (glm5_next full layers; empty otherwise). */
  readonly ape: Float32Array;
}

/** The tensors a layer reads, by Hugging Face name with the layer prefix removed, and their shapes. */
export function dsaWeightShapes(cfg: DsaConfig): Map<string, readonly number[]> {
  const { hidden: D, heads: H, qLora, kvLora, nope, rope, v, idxHeads, dI, kpool } = cfg;
  const shapes = new Map<string, readonly number[]>([
    ['q_a_proj.weight', [qLora, D]],
    ['q_a_layernorm.weight', [qLora]],
    ['q_b_proj.weight', [H * (nope + rope), qLora]],
    ['kv_a_proj_with_mqa.weight', [kvLora + rope, D]],
    ['kv_a_layernorm.weight', [kvLora]],
    ['kv_b_proj.weight', [H * (nope + v), kvLora]],
    ['o_proj.weight', [D, H * v]],
  ]);
  if (cfg.indexerType === 'full') {
    shapes.set('indexer.wq_b.weight', [idxHeads * dI, qLora]);
    shapes.set('indexer.wk.weight', [dI, D]);
    shapes.set('indexer.k_norm.weight', [dI]);
    shapes.set('indexer.k_norm.bias', [dI]);
    shapes.set('indexer.weights_proj.weight', [idxHeads, D]);
    if (cfg.variant === 'glm5_next') {
      shapes.set('indexer.index_kpool_compress_gate', [dI, D]);
      shapes.set('indexer.index_kpool_compress_ape', [kpool, dI]);
    }
  }
  return shapes;
}

/** The Linear weights of xa's and qb's columns, in column order (KERNELS.md "Per-layer device buffers"). */
function projectionNames(cfg: DsaConfig): { wa: string[]; wb: string[] } {
  const full = cfg.indexerType === 'full';
  const wa = ['q_a_proj.weight', 'kv_a_proj_with_mqa.weight'];
  if (full) wa.push('indexer.wk.weight', 'indexer.weights_proj.weight');
  if (full && cfg.variant === 'glm5_next') wa.push('indexer.index_kpool_compress_gate');
  return { wa, wb: ['q_b_proj.weight', ...(full ? ['indexer.wq_b.weight'] : [])] };
}

/**
 * Reads and checks every tensor of a DSA layer and lays them out for the device, in `precision`:
 * Linear weights in the rows' type, or FP8 with their block scales where the checkpoint ships FP8
 * and `precision.fp8Weights` is set; norms, biases and the pool's ape in f32. A missing, misshapen
 * or non-finite tensor throws `WeightsError` naming the tensor and the origin; every shape is
 * checked before any value is converted, and nothing touches a device.
 */
export function loadDsaWeights(source: WeightSource, cfg: DsaConfig, precision: Precision = F32_PRECISION): DsaHostWeights {
  // Messages name a tensor as the checkpoint does (`model.layers.3.self_attn.kv_b_proj.weight`)
  // when the source is a scoped view of one, and the file it is (or would be) in.
  const qualified = (name: string): string => source.qualifiedName?.(name) ?? name;
  const fileOf = (name: string): string => source.fileOf?.(name) ?? source.origin;
  const shapes = dsaWeightShapes(cfg);
  for (const name of shapes.keys()) {
    if (!source.has(name)) {
      const hint = name.startsWith('indexer.') ? ` (layer ${cfg.layerIndex} is a 'full' indexer layer)` : '';
      throw new WeightsError(`missing tensor '${qualified(name)}' of the DSA attention layer${hint}`, fileOf(name));
    }
  }
  for (const [name, shape] of shapes) expectShape({ ...source.get(name), name: qualified(name) }, shape, fileOf(name));

  const linear = (name: string, p: Precision = precision): HostLinear => readLinear(source, name, shapes.get(name) as [number, number], p);
  const vector = (name: string): Float32Array => {
    const bytes = readFloats(source, name, shapes.get(name)!, 'f32');
    return new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4);
  };
  const full = cfg.indexerType === 'full';
  const pooled = full && cfg.variant === 'glm5_next';
  const names = projectionNames(cfg);
  const empty = new Float32Array(0);
  return {
    wa: segmentLinears(names.wa.map((n) => linear(n)), 'wa'),
    wb: segmentLinears(names.wb.map((n) => linear(n)), 'wb'),
    // The absorbed form reads kv_b_proj per head — W_UK[h] (nope rows) as a non-transposed B, W_UV[h]
    // (v rows) from row h·(nope + v) + nope — and neither is a GEMM an FP8 B can be: FP8 needs
    // transB, a packed B and whole 128-row blocks from the slice's first row. kv_b_proj is small
    // (kv_lora × H·(nope + v)), so an FP8 one is dequantized once here to the rows' type.
    kvb: linear('kv_b_proj.weight', { rows: precision.rows, fp8Weights: false }),
    wo: linear('o_proj.weight'),
    qaNorm: vector('q_a_layernorm.weight'),
    kvaNorm: vector('kv_a_layernorm.weight'),
    kNormWeight: full ? vector('indexer.k_norm.weight') : empty,
    kNormBias: full ? vector('indexer.k_norm.bias') : empty,
    ape: pooled ? vector('indexer.index_kpool_compress_ape') : empty,
  };
}
