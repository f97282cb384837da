import { WeightsError, expectShape, toF32, type HostTensor, type WeightSource } from '@metrale/core';
import type { GdnConfig } from './gdn-config.js';

/**
 * One GDN layer's parameters on the host, f32, in the layout the kernels read (KERNELS.md): the
 * input projections in Qwen3-Next's grouped order, whichever layout the checkpoint stored.
 */
export interface GdnHostWeights {
  /** [2·H_k·d_k + 2·H_v·d_v][D]: per key head g, rows [q d_k, k d_k, v r·d_v, z r·d_v]. */
  readonly qkvz: Float32Array;
  /** [2·H_v][D]: per key head g, rows [b r, a r]. */
  readonly ba: Float32Array;
  /** [conv_dim][K]. */
  readonly convWeight: Float32Array;
  readonly dtBias: Float32Array;
  readonly aLog: Float32Array;
  /** [d_v], plain w (not 1 + w). */
  readonly normWeight: Float32Array;
  /** [D][H_v·d_v]. */
  readonly outProj: Float32Array;
  /** How the checkpoint stored the input projections. */
  readonly layout: 'qwen3_next' | 'qwen3_5';
}

/** Hugging Face names (prefix removed) of the fused (Qwen3-Next) and split (Qwen3.5) layouts. */
export const FUSED_NAMES = ['in_proj_qkvz.weight', 'in_proj_ba.weight'] as const;
export const SPLIT_NAMES = ['in_proj_qkv.weight', 'in_proj_z.weight', 'in_proj_b.weight', 'in_proj_a.weight'] as const;
export const COMMON_NAMES = ['conv1d.weight', 'dt_bias', 'A_log', 'norm.weight', 'out_proj.weight'] as const;

/**
 * Reads and checks every tensor of a GDN layer, by its Hugging Face name with the layer prefix
 * removed, and converts the Qwen3.5 split projections into the grouped layout. Every missing,
 * misshapen or non-finite tensor throws `WeightsError` naming the tensor and the origin; nothing
 * touches a device.
 */
export function loadGdnWeights(source: WeightSource, cfg: GdnConfig): GdnHostWeights {
  const { hidden: D, hv, dv, convK, convDim, qkvzDim, valueDim } = cfg;
  const origin = source.origin;
  const split = !source.has('in_proj_qkvz.weight') && source.has('in_proj_qkv.weight');
  const names = [...(split ? SPLIT_NAMES : FUSED_NAMES), ...COMMON_NAMES];
  for (const name of names) {
    if (!source.has(name)) {
      const hint = name === 'in_proj_qkvz.weight' ? ` (nor the Qwen3.5 split projections ${SPLIT_NAMES.map((n) => `'${n}'`).join(', ')})` : '';
      throw new WeightsError(`missing tensor '${name}'${hint} of the Gated DeltaNet layer`, origin);
    }
  }
  const shapes: Record<string, readonly number[]> = {
    'in_proj_qkvz.weight': [qkvzDim, D],
    'in_proj_ba.weight': [2 * hv, D],
    'in_proj_qkv.weight': [convDim, D],
    'in_proj_z.weight': [valueDim, D],
    'in_proj_b.weight': [hv, D],
    'in_proj_a.weight': [hv, D],
    'conv1d.weight': [convDim, 1, convK],
    dt_bias: [hv],
    A_log: [hv],
    'norm.weight': [dv],
    'out_proj.weight': [D, valueDim],
  };
  // Check every shape before converting anything, so the first error names the first bad tensor.
  const tensors = new Map<string, HostTensor>();
  for (const name of names) {
    const t = source.get(name);
    expectShape({ ...t, name }, shapes[name]!, origin);
    tensors.set(name, t);
  }
  const values = (name: string): Float32Array => {
    const v = toF32(tensors.get(name)!);
    for (let i = 0; i < v.length; i++) {
      if (!Number.isFinite(v[i]!)) throw new WeightsError(`tensor '${name}' holds a non-finite value (${v[i]}) at element ${i}`, origin);
    }
    return v;
  };
  let qkvz: Float32Array;
  let ba: Float32Array;
  if (split) {
    ({ qkvz, ba } = groupSplitProjections(cfg, values('in_proj_qkv.weight'), values('in_proj_z.weight'), values('in_proj_b.weight'), values('in_proj_a.weight')));
  } else {
    qkvz = values('in_proj_qkvz.weight');
    ba = values('in_proj_ba.weight');
  }
  return {
    qkvz, ba,
    convWeight: values('conv1d.weight'),
    dtBias: values('dt_bias'),
    aLog: values('A_log'),
    normWeight: values('norm.weight'),
    outProj: values('out_proj.weight'),
    layout: split ? 'qwen3_5' : 'qwen3_next',
  };
}

/**
 * Qwen3.5's split projections into Qwen3-Next's grouped rows: `in_proj_qkv` holds q of all key
 * heads, then k, then v of all value heads (the conv channel order); `in_proj_z` holds z per
 * value head; `in_proj_b` / `in_proj_a` one row per value head. Only rows move, so a GEMM over
 * the grouped matrix gives bit-identical values.
 */
export function groupSplitProjections(
  cfg: GdnConfig, qkv: Float32Array, z: Float32Array, b: Float32Array, a: Float32Array,
): { qkvz: Float32Array; ba: Float32Array } {
  const { hidden: D, hk, dk, dv, r } = cfg;
  const keyDim = hk * dk;
  const group = 2 * dk + 2 * r * dv;
  const qkvz = new Float32Array(cfg.qkvzDim * D);
  const ba = new Float32Array(2 * cfg.hv * D);
  const copyRows = (dst: Float32Array, dstRow: number, src: Float32Array, srcRow: number, rows: number): void => {
    dst.set(src.subarray(srcRow * D, (srcRow + rows) * D), dstRow * D);
  };
  for (let g = 0; g < hk; g++) {
    const base = g * group;
    copyRows(qkvz, base, qkv, g * dk, dk);
    copyRows(qkvz, base + dk, qkv, keyDim + g * dk, dk);
    copyRows(qkvz, base + 2 * dk, qkv, 2 * keyDim + g * r * dv, r * dv);
    copyRows(qkvz, base + 2 * dk + r * dv, z, g * r * dv, r * dv);
    copyRows(ba, g * 2 * r, b, g * r, r);
    copyRows(ba, g * 2 * r + r, a, g * r, r);
  }
  return { qkvz, ba };
}
