import { readLinear, WeightsError, fileOfTensor, type FloatDtype, type HostLinear, type Precision, type WeightSource } from '@metrale/core';
import type { AttentionOptions } from './attention-config.js';
import { readOptionalRowVector, readRowVector } from './layer-precision.js';

export interface AttentionWeights {
  /** q_proj [qWidth][hidden], k_proj, v_proj [kvHeads·d][hidden]: one output row [q | k | v] (StackedLinear); q_proj alone for a KV-sharing layer. */
  readonly qkv: readonly HostLinear[];
  /** [hidden][heads·d]. */
  readonly o: HostLinear;
  readonly qNorm?: Float32Array;
  readonly kNorm?: Float32Array;
}

/**
 * Reads and checks the attention tensors (prefix removed): q/k/v/o_proj in `precision` (FP8 kept
 * when `fp8Weights`), q_norm and k_norm as f32 holding row-type values.
 */
export function loadAttentionWeights(w: WeightSource, o: AttentionOptions, precision: Precision): AttentionWeights {
  const { hidden: D, heads: H, kvHeads: Hkv, headDim: d } = o;
  const qRows = H * d * (o.gated ? 2 : 1);
  // A KV-sharing layer projects q only; the K/V it reads are its source's.
  const qkv = [
    readLinear(w, 'q_proj.weight', [qRows, D], precision),
    ...(o.kvSource ? [] : [readLinear(w, 'k_proj.weight', [Hkv * d, D], precision), readLinear(w, 'v_proj.weight', [Hkv * d, D], precision)]),
  ];
  for (const bias of ['q_proj.bias', 'k_proj.bias', 'v_proj.bias', 'o_proj.bias']) {
    if (w.has(bias)) throw new WeightsError(`tensor '${bias}' is present, but the attention layer has no projection biases`, fileOfTensor(w, bias));
  }
  const rows: FloatDtype = precision.rows;
  const qNorm = o.qkNorm ? readRowVector(w, 'q_norm.weight', d, rows) : readOptionalRowVector(w, 'q_norm.weight', d, rows);
  const kNorm = o.kvSource ? undefined : o.qkNorm ? readRowVector(w, 'k_norm.weight', d, rows) : readOptionalRowVector(w, 'k_norm.weight', d, rows);
  return { qkv, o: readLinear(w, 'o_proj.weight', [D, H * d], precision), ...(qNorm ? { qNorm } : {}), ...(kNorm ? { kNorm } : {}) };
}
