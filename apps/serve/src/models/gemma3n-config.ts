import { WeightsError } from '@metrale/core';
import { intField } from './config-fields.js';
import { textConfigOf, textConfigWhere } from './text-config.js';

type Config = Readonly<Record<string, unknown>>;

export type Gemma3nLayerType = 'sliding_attention' | 'full_attention';

/** Gemma 3n's text config as the model is built from it (docs/models/gemma3n-text.md). */
export interface Gemma3nText {
  /** The flat text config (for the PLE layers, which read it themselves). */
  readonly config: Config;
  readonly where: string;
  readonly hidden: number;
  readonly vocab: number;
  readonly layers: number;
  readonly heads: number;
  readonly kvHeads: number;
  readonly headDim: number;
  readonly eps: number;
  readonly types: readonly Gemma3nLayerType[];
  /** Per layer: `intermediate_size` (an int, or a list per layer). */
  readonly inter: readonly number[];
  /** Per layer: activation sparsity (0: none). */
  readonly sparsity: readonly number[];
  readonly window: number;
  readonly thetas: Readonly<Record<Gemma3nLayerType, number>>;
  /** Layer l ≥ firstShared (when > 0) reads the KV of the last layer of its type before it. */
  readonly firstShared: number;
  readonly streams: number;
  readonly active: number;
  readonly correctScale: boolean;
  readonly laurelRank: number;
  readonly softcap: number | undefined;
}

const SIZES = [
  'vocab_size', 'vocab_size_per_layer_input', 'hidden_size', 'hidden_size_per_layer_input', 'num_hidden_layers', 'num_attention_heads',
  'num_key_value_heads', 'head_dim', 'sliding_window', 'laurel_rank',
] as const;

/**
 * Reads and checks a `gemma3n_text` config or a `gemma3n` one's `text_config` (`textConfigOf`),
 * naming the field on every error: sizes, per-layer widths and sparsity, layer types, the two RoPE
 * thetas (`rope_parameters.{full,sliding}_attention.rope_theta`, or the legacy `rope_theta` /
 * `rope_local_base_freq`), KV sharing, AltUp and Laurel.
 */
export function gemma3nText(config: Config): Gemma3nText {
  const c = textConfigOf(config);
  const where = textConfigWhere(config);
  const int = (name: string, fallback?: number, min = 1): number =>
    intField(c, name, { where, min, missing: 'a Gemma 3n config.json must give it', ...(fallback !== undefined ? { fallback } : {}) });
  for (const name of SIZES) int(name);
  const layers = int('num_hidden_layers');
  const perLayer = <T>(name: string, fallback: T, ok: (v: unknown) => v is T): T[] => {
    const v = c[name] ?? fallback;
    if (Array.isArray(v)) {
      if (v.length !== layers || !v.every(ok)) throw new WeightsError(`${where}.${name} must give one value per layer (num_hidden_layers ${layers}), got ${JSON.stringify(v)}`);
      return v as T[];
    }
    if (!ok(v)) throw new WeightsError(`${where}.${name} is ${JSON.stringify(v)}`);
    return Array.from({ length: layers }, () => v);
  };
  const types = perLayer<Gemma3nLayerType>('layer_types', undefined as never, (v): v is Gemma3nLayerType => v === 'sliding_attention' || v === 'full_attention');
  const inter = perLayer<number>('intermediate_size', undefined as never, (v): v is number => Number.isSafeInteger(v) && (v as number) > 0);
  const sparsity = perLayer<number>('activation_sparsity_pattern', 0, (v): v is number => typeof v === 'number' && v >= 0 && v < 1);
  const act = c.hidden_activation ?? 'gelu_pytorch_tanh';
  if (act !== 'gelu_pytorch_tanh') throw new WeightsError(`${where}.hidden_activation is ${JSON.stringify(act)}; Gemma 3n's MLPs compute 'gelu_pytorch_tanh' only`);
  if (c.attention_bias === true) throw new WeightsError(`${where}.attention_bias is true; the attention layer has no projection biases`);
  if (c.attn_logit_softcapping !== undefined && c.attn_logit_softcapping !== null) {
    throw new WeightsError(`${where}.attn_logit_softcapping is set; Hugging Face's Gemma 3n attention has no soft-capping and neither does metrale's`);
  }
  const rp = (c.rope_parameters ?? {}) as Record<string, Record<string, unknown> | undefined>;
  const theta = (type: Gemma3nLayerType, legacy: string, fallback: number): number => {
    const p = rp[type];
    const kind = p?.rope_type ?? 'default';
    if (kind !== 'default') throw new WeightsError(`${where}.rope_parameters.${type}.rope_type is ${JSON.stringify(kind)}; metrale implements 'default' RoPE only`);
    const v = p?.rope_theta ?? c[legacy] ?? fallback;
    if (typeof v !== 'number' || !(v > 0)) throw new WeightsError(`${where}.rope_parameters.${type}.rope_theta must be a positive number, got ${JSON.stringify(v)}`);
    return v;
  };
  const shared = int('num_kv_shared_layers', 0, 0);
  if (shared >= layers) throw new WeightsError(`${where}.num_kv_shared_layers (${shared}) must be below num_hidden_layers (${layers})`);
  const firstShared = layers - shared;
  for (let l = firstShared; l < layers && shared > 0; l++) {
    if (!types.slice(0, firstShared).includes(types[l]!)) throw new WeightsError(`${where}.layer_types: KV-shared layer ${l} (${types[l]}) has no earlier ${types[l]} layer to read`);
  }
  const streams = int('altup_num_inputs', 4, 2);
  const active = int('altup_active_idx', 0, 0);
  if (active >= streams) throw new WeightsError(`${where}.altup_active_idx (${active}) must be below altup_num_inputs (${streams})`);
  // HF's default when the config leaves it out is 30; null turns it off.
  const softcap = c.final_logit_softcapping === undefined ? 30 : c.final_logit_softcapping;
  if (softcap !== undefined && softcap !== null && !(typeof softcap === 'number' && softcap > 0)) {
    throw new WeightsError(`${where}.final_logit_softcapping must be a positive number or null, got ${JSON.stringify(softcap)}`);
  }
  const eps = c.rms_norm_eps ?? 1e-6;
  if (typeof eps !== 'number' || !(eps > 0)) throw new WeightsError(`${where}.rms_norm_eps must be a positive number, got ${JSON.stringify(eps)}`);
  return {
    config: { ...c, hidden_activation: 'gelu_pytorch_tanh' }, where, hidden: int('hidden_size'), vocab: int('vocab_size'), layers, heads: int('num_attention_heads'),
    kvHeads: int('num_key_value_heads'), headDim: int('head_dim'), eps, types, inter, sparsity, window: int('sliding_window'),
    thetas: { full_attention: theta('full_attention', 'rope_theta', 1e6), sliding_attention: theta('sliding_attention', 'rope_local_base_freq', 1e4) },
    firstShared: shared > 0 ? firstShared : layers, streams, active, correctScale: c.altup_correct_scale !== false, laurelRank: int('laurel_rank'),
    softcap: (softcap as number | null | undefined) ?? undefined,
  };
}

/** The layer whose KV cache layer l reads: itself, or for a KV-shared layer the last layer of its type before the shared range. */
export function kvSourceOf(t: Gemma3nText, l: number): number {
  if (l < t.firstShared) return l;
  return t.types.lastIndexOf(t.types[l]!, t.firstShared - 1);
}
