import { WeightsError, type DevicePtr, type KvPageBinding, type Precision } from '@metrale/core';
import { fields, type Config } from './config-fields.js';

/** What a KV-sharing layer needs of the layer whose cache it reads (an `AttentionLayer`). */
export interface KvSource {
  readonly options: AttentionOptions;
  /** The pool binding and the source's K and V pages, once bound (`kvBind`). */
  kvCache(): { readonly binding: KvPageBinding; readonly k: DevicePtr; readonly v: DevicePtr } | undefined;
}

export interface AttentionOptions {
  readonly hidden: number;
  readonly heads: number;
  readonly kvHeads: number;
  readonly headDim: number;
  /** `q_proj` yields, per head, d query values then d gate values; the output is scaled by sigmoid(gate) (Qwen3-Next). */
  readonly gated: boolean;
  /** `q_norm` / `k_norm` RMSNorm over each head, with w or 1 + w (`normOffset`). */
  readonly qkNorm: boolean;
  readonly normOffset: 0 | 1;
  /**
   * Whether the q/k norms round x̂ to the row type before the weight, as Hugging Face's Llama-style
   * norms do (`w · x̂.to(dtype)`: GLM), or multiply in f32 and round once (`Qwen3NextRMSNorm`,
   * `Gemma3nRMSNorm`). Default: `normOffset === 0`. Nothing in f32.
   */
  readonly roundNormalized?: boolean;
  readonly eps: number;
  /** RoPE on the first `rotaryDim` dims of each head (`head_dim · partial_rotary_factor`), NeoX halves. */
  readonly rotaryDim: number;
  readonly ropeTheta: number;
  /** Softmax scale of q·k (default 1/sqrt(headDim); Gemma 3n: 1.0, its norms set the scale). */
  readonly scale?: number;
  /**
   * Sliding window w (HF `sliding_window`): a row at position p sees keys p − w + 1 … p, itself
   * included. Absent or 0: full causal attention. The cache still holds every key.
   */
  readonly window?: number;
  /** RMS-normalise v over each head without a weight before it enters the cache (Gemma 3n's `v_norm`). */
  readonly vNorm?: boolean;
  /**
   * KV sharing (Gemma 3n's last `num_kv_shared_layers`): read the K/V cache of this earlier layer
   * of the same stack instead of owning one. The layer then has no k/v projections or norms, and
   * must run after its source in every step.
   */
  readonly kvSource?: KvSource;
  /**
   * Rows, q/k/v, the KV cache and the output in `precision.rows`, the projections' weights in that
   * type (FP8 kept when `fp8Weights`); norms, RoPE, softmax and its sums f32. Default F32_PRECISION.
   */
  readonly precision?: Precision;
}

/** `rope_parameters` (transformers 5) or the older top-level `rope_theta` / `partial_rotary_factor`. */
export function ropeOf(config: Config, defaultPartial: number): { theta: number; partial: number } {
  const rp = (typeof config.rope_parameters === 'object' && config.rope_parameters !== null ? config.rope_parameters : {}) as Record<string, unknown>;
  const scaling = (typeof config.rope_scaling === 'object' && config.rope_scaling !== null ? config.rope_scaling : {}) as Record<string, unknown>;
  const type = rp.rope_type ?? rp.type ?? scaling.rope_type ?? scaling.type ?? 'default';
  if (type !== 'default') throw new WeightsError(`config.rope_parameters.rope_type is ${JSON.stringify(type)}; the attention layer implements 'default' RoPE only`);
  const theta = (rp.rope_theta ?? config.rope_theta ?? 10000) as number;
  const partial = (rp.partial_rotary_factor ?? config.partial_rotary_factor ?? defaultPartial) as number;
  if (typeof theta !== 'number' || !(theta > 0)) throw new WeightsError(`config: rope_theta must be a positive number, got ${JSON.stringify(theta)}`);
  if (typeof partial !== 'number' || !(partial > 0 && partial <= 1)) throw new WeightsError(`config: partial_rotary_factor must be in (0, 1], got ${JSON.stringify(partial)}`);
  return { theta, partial };
}

/** Qwen3-Next's `Qwen3NextAttention`: gated q_proj, q/k norms with 1 + w, partial RoPE (default 0.25), GQA. */
export function qwen3NextAttentionOptions(config: Config): AttentionOptions {
  const f = fields(config, 'Qwen3-Next attention layer');
  const hidden = f.int('hidden_size');
  const heads = f.int('num_attention_heads');
  const headDim = f.int('head_dim', Math.floor(hidden / heads));
  if (config.attention_bias === true) throw new WeightsError('config.attention_bias is true; the attention layer has no projection biases');
  const { theta, partial } = ropeOf(config, 0.25);
  return checkAttention({
    hidden, heads, kvHeads: f.int('num_key_value_heads', heads), headDim, gated: true, qkNorm: true, normOffset: 1,
    eps: f.num('rms_norm_eps', 1e-6), rotaryDim: Math.floor(headDim * partial), ropeTheta: theta,
  });
}

export function checkAttention(o: AttentionOptions): AttentionOptions {
  if (o.window !== undefined && (!Number.isSafeInteger(o.window) || o.window < 0)) throw new WeightsError(`config: sliding_window must be a non-negative integer, got ${o.window}`);
  if (o.scale !== undefined && !(o.scale > 0 && Number.isFinite(o.scale))) throw new WeightsError(`attention: the softmax scale must be a positive number, got ${o.scale}`);
  const src = o.kvSource?.options;
  if (src && (src.kvHeads !== o.kvHeads || src.headDim !== o.headDim || src.kvSource)) {
    throw new WeightsError(
      `attention: a KV-sharing layer (${o.kvHeads} KV heads × ${o.headDim}) must read a layer that owns a cache of the same shape (it has ${src.kvHeads} × ${src.headDim}${src.kvSource ? ', and shares another layer\'s' : ''})`,
    );
  }
  if (src && (src.precision?.rows ?? 'f32') !== (o.precision?.rows ?? 'f32')) {
    throw new WeightsError(`attention: a KV-sharing layer must have its source's row type (${src.precision?.rows ?? 'f32'}), got ${o.precision?.rows ?? 'f32'}`);
  }
  if (o.heads % o.kvHeads !== 0) throw new WeightsError(`config: num_attention_heads (${o.heads}) must be a multiple of num_key_value_heads (${o.kvHeads})`);
  if (o.rotaryDim % 2 !== 0 || o.rotaryDim > o.headDim) throw new WeightsError(`config: the rotary dimension ${o.rotaryDim} must be even and at most head_dim (${o.headDim})`);
  return o;
}
