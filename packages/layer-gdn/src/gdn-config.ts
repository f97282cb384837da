import { WeightsError } from '@metrale/core';

/** The shape of one Gated DeltaNet layer, read from a Qwen3-Next or Qwen3.5 config. */
export interface GdnConfig {
  /** `hidden_size` (D). */
  readonly hidden: number;
  /** `linear_num_key_heads` (H_k). */
  readonly hk: number;
  /** `linear_num_value_heads` (H_v), a multiple of H_k. */
  readonly hv: number;
  /** `linear_key_head_dim` (d_k). */
  readonly dk: number;
  /** `linear_value_head_dim` (d_v). */
  readonly dv: number;
  /** `linear_conv_kernel_dim` (K). */
  readonly convK: number;
  /** `rms_norm_eps`, of the gated RMSNorm. */
  readonly eps: number;
  /** Value heads per key head (H_v / H_k). */
  readonly r: number;
  /** 2·H_k·d_k + H_v·d_v: the conv channels (q, k, v). */
  readonly convDim: number;
  /** 2·H_k·d_k + 2·H_v·d_v: width of an `in_proj_qkvz` output row. */
  readonly qkvzDim: number;
  /** Width of a row of the input projections' output, `in_proj_qkvz`'s then `in_proj_ba`'s columns (projectionRow). */
  readonly projDim: number;
  /** H_v·d_v: width of the gated-norm output, the input of `out_proj`. */
  readonly valueDim: number;
}

/**
 * A row of the input projections' output as every kernel reads it (one GEMM over the stacked
 * weights [in_proj_qkvz; in_proj_ba]): in_proj_qkvz's 2·H_k·d_k + 2·H_v·d_v columns, then
 * in_proj_ba's 2·H_v from column `baCol`, the width rounded up to 4 floats so that rows stay
 * 16-byte aligned for the kernels' vector loads (kernels/gdn-step.cuh geo_of).
 */
export function projectionRow(s: { readonly hk: number; readonly hv: number; readonly dk: number; readonly dv: number }): { baCol: number; width: number } {
  const baCol = 2 * s.hk * s.dk + 2 * s.hv * s.dv;
  return { baCol, width: baCol + Math.ceil((2 * s.hv) / 4) * 4 };
}

const MODEL_TYPES = ['qwen3_next', 'qwen3_5', 'qwen3_5_text', 'qwen3_5_moe', 'qwen3_5_moe_text'];

/**
 * The text config that holds the GDN fields: the config itself, or its `text_config` (Qwen3.5
 * multimodal checkpoints nest the language model's config there).
 */
function textConfig(config: Readonly<Record<string, unknown>>): Readonly<Record<string, unknown>> {
  if (config.linear_num_key_heads === undefined && typeof config.text_config === 'object' && config.text_config !== null) {
    return config.text_config as Record<string, unknown>;
  }
  return config;
}

/**
 * Reads the GDN shape from a Hugging Face config (`qwen3_next`, or `qwen3_5` with or without a
 * nested `text_config`). Throws `WeightsError` naming the field for anything missing or wrong;
 * with `layerIndex`, also refuses a layer that `layer_types` marks as not `linear_attention`.
 */
export function readGdnConfig(config: Readonly<Record<string, unknown>>, layerIndex?: number): GdnConfig {
  if (typeof config !== 'object' || config === null) throw new WeightsError(`config must be an object, got ${config === null ? 'null' : typeof config}`);
  const c = textConfig(config);
  const where = c === config ? 'config' : 'config.text_config';
  const modelType = c.model_type ?? config.model_type;
  if (modelType !== undefined && !MODEL_TYPES.includes(String(modelType))) {
    throw new WeightsError(`${where}.model_type is ${JSON.stringify(modelType)}; Gated DeltaNet layers come from ${MODEL_TYPES.join(', ')}`);
  }
  const int = (name: string): number => {
    const v = c[name];
    if (v === undefined) throw new WeightsError(`${where}.${name} is missing (needed by the Gated DeltaNet layer)`);
    if (!Number.isSafeInteger(v) || (v as number) < 1) throw new WeightsError(`${where}.${name} must be a positive integer, got ${JSON.stringify(v)}`);
    return v as number;
  };
  const hidden = int('hidden_size');
  const hk = int('linear_num_key_heads');
  const hv = int('linear_num_value_heads');
  const dk = int('linear_key_head_dim');
  const dv = int('linear_value_head_dim');
  const convK = int('linear_conv_kernel_dim');
  if (hv % hk !== 0) {
    throw new WeightsError(
      `${where}: head counts do not divide: linear_num_value_heads (${hv}) must be a multiple of linear_num_key_heads (${hk})`,
    );
  }
  const eps = c.rms_norm_eps ?? 1e-6;
  if (typeof eps !== 'number' || !Number.isFinite(eps) || eps <= 0) throw new WeightsError(`${where}.rms_norm_eps must be a positive number, got ${JSON.stringify(eps)}`);
  const act = c.hidden_act ?? 'silu';
  if (act !== 'silu' && act !== 'swish') {
    throw new WeightsError(`${where}.hidden_act is ${JSON.stringify(act)}; the Gated DeltaNet conv activation must be 'silu' (or 'swish')`);
  }
  const dtype = c.metrale_weight_dtype ?? config.metrale_weight_dtype;
  if (dtype !== undefined) {
    throw new WeightsError(
      `${where}.metrale_weight_dtype is ${JSON.stringify(dtype)}: no longer read; the layer's weights and rows follow the model's precision ` +
        `(--dtype, the layer context's precision); remove the field`,
    );
  }
  if (layerIndex !== undefined && Array.isArray(c.layer_types)) {
    const t = (c.layer_types as unknown[])[layerIndex];
    if (t !== undefined && t !== 'linear_attention') {
      throw new WeightsError(`${where}.layer_types[${layerIndex}] is ${JSON.stringify(t)}, not 'linear_attention': layer ${layerIndex} is not a Gated DeltaNet layer`);
    }
  }
  const keyDim = hk * dk;
  const valueDim = hv * dv;
  return {
    hidden, hk, hv, dk, dv, convK, eps, r: hv / hk,
    convDim: 2 * keyDim + valueDim,
    qkvzDim: 2 * keyDim + 2 * valueDim,
    projDim: projectionRow({ hk, hv, dk, dv }).width,
    valueDim,
  };
}
