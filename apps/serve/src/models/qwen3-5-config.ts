import { WeightsError } from '@metrale/core';
import { intField } from './config-fields.js';
import { textConfigOf, textConfigWhere } from './text-config.js';

type Config = Readonly<Record<string, unknown>>;

/** Qwen3.5's feed-forward: a dense SwiGLU in every layer (`qwen3_5`) or a MoE with a gated shared expert in every layer (`qwen3_5_moe`). */
export type Qwen35Family = 'dense' | 'moe';

export type Qwen35LayerType = 'linear_attention' | 'full_attention';

/** The fields every Qwen3.5 text model needs; HF's defaults for them are no real model's sizes. */
const SIZES = [
  'vocab_size', 'hidden_size', 'num_hidden_layers', 'num_attention_heads', 'num_key_value_heads', 'head_dim',
  'linear_num_key_heads', 'linear_num_value_heads', 'linear_key_head_dim', 'linear_value_head_dim', 'linear_conv_kernel_dim',
] as const;
const FEED_FORWARD: Readonly<Record<Qwen35Family, readonly string[]>> = {
  dense: ['intermediate_size'],
  moe: ['num_experts', 'num_experts_per_tok', 'moe_intermediate_size', 'shared_expert_intermediate_size'],
};

/**
 * `layer_types`, or the pattern `full_attention_interval` gives (default 4: every 4th layer full
 * attention), as `Qwen3_5TextConfig` builds it. `where` names the config for messages.
 */
export function qwen35LayerTypes(text: Config, where = 'config'): Qwen35LayerType[] {
  const n = text.num_hidden_layers as number;
  const given = text.layer_types;
  if (given !== undefined && given !== null) {
    if (!Array.isArray(given) || given.length !== n) {
      throw new WeightsError(`${where}.layer_types must list one of 'linear_attention' / 'full_attention' per layer (num_hidden_layers ${n}), got ${JSON.stringify(given)}`);
    }
    return given.map((t, i) => {
      if (t !== 'linear_attention' && t !== 'full_attention') {
        throw new WeightsError(`${where}.layer_types[${i}] is ${JSON.stringify(t)}; Qwen3.5 layers are 'linear_attention' (Gated DeltaNet) or 'full_attention'`);
      }
      return t;
    });
  }
  const interval = intField(text, 'full_attention_interval', { where, fallback: 4 });
  return Array.from({ length: n }, (_, i) => ((i + 1) % interval === 0 ? 'full_attention' : 'linear_attention'));
}

/**
 * The text model's config of a Qwen3.5 checkpoint, flat (`textConfigOf`: the published
 * vision-language config's `text_config`, the top-level `tie_word_embeddings`), checked: every
 * size the model is built from present and a positive integer, `hidden_act` SiLU, and
 * `layer_types` made explicit. A MoE's top-k weights are always renormalised
 * (`Qwen3_5MoeTopKRouter`; the config has no `norm_topk_prob`). Throws `WeightsError` naming
 * the field (`config.text_config.hidden_size is missing …`).
 */
export function qwen35TextConfig(config: Config, family: Qwen35Family): Config {
  const text = textConfigOf(config);
  const where = textConfigWhere(config);
  const modelType = String(config.model_type);
  const missing = `a ${modelType} checkpoint's config.json must give it (as the published Qwen3.5 configs do)`;
  for (const name of [...SIZES, ...FEED_FORWARD[family]]) intField(text, name, { where, missing });
  const act = text.hidden_act ?? 'silu';
  if (act !== 'silu' && act !== 'swish') throw new WeightsError(`${where}.hidden_act is ${JSON.stringify(act)}; Qwen3.5's MLPs and Gated DeltaNet conv compute 'silu' only`);
  return {
    ...text,
    layer_types: qwen35LayerTypes(text, where),
    ...(family === 'moe' ? { norm_topk_prob: true } : {}),
  };
}
