import { WeightsError, expectShape, toF32, type HostTensor, type WeightSource } from '@metrale/core';
import { dsaGeometry, type DsaConfig } from './dsa-config.js';

/** One DSA layer's parameters on the host, f32, in the layouts the kernels and GEMMs read (KERNELS.md). */
export interface DsaHostWeights {
  /** [xaWidth][D]: q_a_proj; kv_a_proj_with_mqa; then, for full layers, indexer.wk; indexer.weights_proj; indexer.index_kpool_compress_gate (glm5_next). */
  readonly wa: Float32Array;
  /** [qbWidth][qLora]: q_b_proj; then, for full layers, indexer.wq_b. */
  readonly wb: Float32Array;
  /** [H·(nope + v)][kvLora]: kv_b_proj (per head: nope rows of W_UK, then v rows of W_UV). */
  readonly kvb: Float32Array;
  /** [D][H·v]: o_proj. */
  readonly wo: Float32Array;
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

/**
 * Reads and checks every tensor of a DSA layer and lays them out for the device. A missing,
 * misshapen or non-finite tensor throws `WeightsError` naming the tensor and the origin; every
 * shape is checked before any value is converted, and nothing touches a device.
 */
export function loadDsaWeights(source: WeightSource, cfg: DsaConfig): DsaHostWeights {
  const origin = source.origin;
  // Messages name a tensor as the checkpoint does (`model.layers.3.self_attn.kv_b_proj.weight`)
  // when the source is a scoped view of one, and the file it is (or would be) in.
  const qualified = (name: string): string => source.qualifiedName?.(name) ?? name;
  const fileOf = (name: string): string => source.fileOf?.(name) ?? origin;
  const shapes = dsaWeightShapes(cfg);
  for (const name of shapes.keys()) {
    if (!source.has(name)) {
      const hint = name.startsWith('indexer.') ? ` (layer ${cfg.layerIndex} is a 'full' indexer layer)` : '';
      throw new WeightsError(`missing tensor '${qualified(name)}' of the DSA attention layer${hint}`, fileOf(name));
    }
  }
  const tensors = new Map<string, HostTensor>();
  for (const [name, shape] of shapes) {
    const t = source.get(name);
    expectShape({ ...t, name: qualified(name) }, shape, fileOf(name));
    tensors.set(name, t);
  }
  const values = (name: string): Float32Array => {
    const x = toF32(tensors.get(name)!);
    for (let i = 0; i < x.length; i++) {
      if (!Number.isFinite(x[i]!)) throw new WeightsError(`tensor '${qualified(name)}' holds a non-finite value (${x[i]}) at element ${i}`, fileOf(name));
    }
    return x;
  };
  const geo = dsaGeometry(cfg);
  const concat = (names: readonly string[], rows: number, cols: number): Float32Array => {
    const out = new Float32Array(rows * cols);
    let at = 0;
    for (const n of names) {
      const x = values(n);
      out.set(x, at);
      at += x.length;
    }
    if (at !== out.length) throw new WeightsError(`internal: ${names.join(' + ')} fill ${at} of ${out.length} values`, origin);
    return out;
  };
  const full = cfg.indexerType === 'full';
  const pooled = full && cfg.variant === 'glm5_next';
  const waNames = ['q_a_proj.weight', 'kv_a_proj_with_mqa.weight'];
  if (full) waNames.push('indexer.wk.weight', 'indexer.weights_proj.weight');
  if (pooled) waNames.push('indexer.index_kpool_compress_gate');
  const wbNames = ['q_b_proj.weight', ...(full ? ['indexer.wq_b.weight'] : [])];
  const empty = new Float32Array(0);
  return {
    wa: concat(waNames, geo.xaWidth, cfg.hidden),
    wb: concat(wbNames, geo.qbWidth, cfg.qLora),
    kvb: values('kv_b_proj.weight'),
    wo: values('o_proj.weight'),
    qaNorm: values('q_a_layernorm.weight'),
    kvaNorm: values('kv_a_layernorm.weight'),
    kNormWeight: full ? values('indexer.k_norm.weight') : empty,
    kNormBias: full ? values('indexer.k_norm.bias') : empty,
    ape: pooled ? values('indexer.index_kpool_compress_ape') : empty,
  };
}
