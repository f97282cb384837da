import { readF32, readOptionalF32, WeightsError, fileOfTensor, type WeightSource } from '@metrale/core';
import type { AttentionOptions } from './attention-config.js';

export interface AttentionWeights {
  /** [qWidth + 2·kvHeads·d][hidden]: q_proj rows, then k_proj, then v_proj (one GEMM). */
  readonly qkv: Float32Array;
  /** [hidden][heads·d]. */
  readonly o: Float32Array;
  readonly qNorm?: Float32Array;
  readonly kNorm?: Float32Array;
}

/** Reads and checks the attention tensors (prefix removed): q/k/v/o_proj, q_norm, k_norm. */
export function loadAttentionWeights(w: WeightSource, o: AttentionOptions): AttentionWeights {
  const { hidden: D, heads: H, kvHeads: Hkv, headDim: d } = o;
  const qRows = H * d * (o.gated ? 2 : 1);
  const q = readF32(w, 'q_proj.weight', [qRows, D]);
  const k = readF32(w, 'k_proj.weight', [Hkv * d, D]);
  const v = readF32(w, 'v_proj.weight', [Hkv * d, D]);
  const qkv = new Float32Array((qRows + 2 * Hkv * d) * D);
  qkv.set(q);
  qkv.set(k, qRows * D);
  qkv.set(v, (qRows + Hkv * d) * D);
  for (const bias of ['q_proj.bias', 'k_proj.bias', 'v_proj.bias', 'o_proj.bias']) {
    if (w.has(bias)) throw new WeightsError(`tensor '${bias}' is present, but the attention layer has no projection biases`, fileOfTensor(w, bias));
  }
  const qNorm = o.qkNorm ? readF32(w, 'q_norm.weight', [d]) : readOptionalF32(w, 'q_norm.weight', [d]);
  const kNorm = o.qkNorm ? readF32(w, 'k_norm.weight', [d]) : readOptionalF32(w, 'k_norm.weight', [d]);
  return { qkv, o: readF32(w, 'o_proj.weight', [D, H * d]), ...(qNorm ? { qNorm } : {}), ...(kNorm ? { kNorm } : {}) };
}
