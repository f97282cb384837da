// A Qwen3.5-MoE-shaped model (Qwen3.5-35B-A3B's text model) with random weights in the published
// checkpoint's layout: `Qwen3_5MoeForConditionalGeneration`, model_type `qwen3_5_moe` with the text
// model's fields in `text_config`, its tensors under `model.language_model.*` (Gated DeltaNet's
// split `in_proj_qkv` / `in_proj_z` / `in_proj_b` / `in_proj_a`, the routed experts fused as
// `mlp.experts.gate_up_proj` [E, 2I, H] and `mlp.experts.down_proj` [E, H, I]) and `lm_head.weight`.
// The vision tower (`model.visual.*`) and the MTP layer (`mtp.*`), which the adapter never reads,
// are left out. 40 layers (30 Gated DeltaNet, 10 gated attention), 256 experts, top-8: the bf16
// weights take 64.6 GiB, so all experts fit one H200 (`experts` can still reduce them, top-8 kept).
import { resolvePrecision } from '@metrale/core';
import { qwen3NextTensorPlan } from '../../dist/index.js';
import { qwenHybridFloor, randomWeights } from './shared.mjs';

// The text config: transformers' `Qwen3_5MoeTextConfig` defaults (transformers 5.x,
// models/qwen3_5_moe/configuration_qwen3_5_moe.py), which that class documents as the
// "Qwen3.5-35B-A3B style configuration" (checkpoint Qwen/Qwen3.5-35B-A3B); `layer_types` is its
// default pattern (full_attention_interval 4). RoPE θ 1e7 with the partial factor 0.25 as in
// Qwen3-Next-80B (the published Qwen3.5 value was not checked here; it moves no bytes).
const TEXT = {
  model_type: 'qwen3_5_moe_text', vocab_size: 248320, hidden_size: 2048, num_hidden_layers: 40, num_attention_heads: 16,
  num_key_value_heads: 2, head_dim: 256, linear_conv_kernel_dim: 4, linear_key_head_dim: 128, linear_value_head_dim: 128,
  linear_num_key_heads: 16, linear_num_value_heads: 32, moe_intermediate_size: 512, shared_expert_intermediate_size: 512,
  num_experts_per_tok: 8, num_experts: 256, hidden_act: 'silu', rms_norm_eps: 1e-6, attention_bias: false,
  max_position_embeddings: 32768, rope_parameters: { rope_type: 'default', rope_theta: 10000000, partial_rotary_factor: 0.25 },
  tie_word_embeddings: false,
};
// A 4-layer, narrow model of the same structure (3 Gated DeltaNet, 1 attention), to check a bench on the CPU.
const TINY = {
  ...TEXT, vocab_size: 2048, hidden_size: 64, num_hidden_layers: 4, num_attention_heads: 4, head_dim: 16,
  linear_num_key_heads: 2, linear_num_value_heads: 4, linear_key_head_dim: 16, linear_value_head_dim: 16,
  num_experts: 8, num_experts_per_tok: 2, moe_intermediate_size: 32, shared_expert_intermediate_size: 32,
};
const PUBLISHED_EXPERTS = TEXT.num_experts;

/** The experts the decode bench keeps by default: all 256 (bf16: 64.6 GiB of weights). */
export const DEFAULT_EXPERTS = PUBLISHED_EXPERTS;

/**
 * Qwen3.5's tensors (text model, under `model.language_model.`) from Qwen3-Next's plan of the same
 * sizes and spreads: the GDN input projections split, the routed experts fused.
 */
function qwen35MoePlan(text, outGain) {
  const { hidden_size: H, num_experts: E, moe_intermediate_size: I } = text;
  const keyDim = text.linear_num_key_heads * text.linear_key_head_dim;
  const valueDim = text.linear_num_value_heads * text.linear_value_head_dim;
  const hv = text.linear_num_value_heads;
  const split = {
    'linear_attn.in_proj_qkvz.weight': [['linear_attn.in_proj_qkv.weight', [2 * keyDim + valueDim, H]], ['linear_attn.in_proj_z.weight', [valueDim, H]]],
    'linear_attn.in_proj_ba.weight': [['linear_attn.in_proj_b.weight', [hv, H]], ['linear_attn.in_proj_a.weight', [hv, H]]],
    'mlp.experts.0.gate_proj.weight': [['mlp.experts.gate_up_proj', [E, 2 * I, H]]],
    'mlp.experts.0.down_proj.weight': [['mlp.experts.down_proj', [E, H, I]]],
  };
  return qwen3NextTensorPlan({ ...text, mlp_only_layers: [] }, outGain).flatMap((t) => {
    const name = t.name.replace(/^model\./, 'model.language_model.');
    const [, layer, rest] = /^(model\.language_model\.layers\.\d+\.)(.*)$/.exec(name) ?? [];
    if (rest && split[rest]) return split[rest].map(([n, shape]) => ({ ...t, name: layer + n, shape }));
    if (rest && /^mlp\.experts\./.test(rest)) return [];
    return [{ ...t, name }];
  });
}

/** Config (`qwen3_5_moe` with `text_config`), precision, weight source, plan, bytes and decode floor; `dtype` bf16 or f32. */
export function randomQwen35MoeModel({ dtype = 'bf16', experts, layers, tiny = false } = {}) {
  if (!['bf16', 'f32'].includes(dtype)) throw new Error(`--dtype must be bf16 or f32 for qwen3.5-moe, got ${dtype}`);
  const text = structuredClone(tiny ? TINY : TEXT);
  if (experts !== undefined && !tiny) text.num_experts = experts;
  if (layers !== undefined) text.num_hidden_layers = layers;
  text.layer_types = Array.from({ length: text.num_hidden_layers }, (_, i) => ((i + 1) % 4 === 0 ? 'full_attention' : 'linear_attention'));
  const config = { architectures: ['Qwen3_5MoeForConditionalGeneration'], model_type: 'qwen3_5_moe', text_config: text, tie_word_embeddings: false, dtype: 'bfloat16' };
  const precision = resolvePrecision(dtype, config);

  const plan = [...qwen35MoePlan(text, 0.3), { name: 'lm_head.weight', shape: [text.vocab_size, text.hidden_size], std: 4 / Math.sqrt(text.hidden_size), offset: 0 }];
  const embed = 'model.language_model.embed_tokens.weight';
  const random = randomWeights({ origin: 'random Qwen3.5-MoE-shaped weights', plan, head: 'lm_head.weight', embed });
  const rowBytes = precision.rows === 'f32' ? 4 : 2;
  const bytesOf = (t) => random.bytesOf(t, rowBytes);
  const floor = qwenHybridFloor({ text, plan, bytesOf, rowBytes, embed, isExpert: (t) => /\.mlp\.experts\./.test(t.name) });
  return {
    name: 'qwen3.5-moe', bench: 'qwen3.5-moe-shaped decode', modelType: config.model_type,
    config, text, precision, weights: random.weights, plan, bytesOf, rowBytes,
    layers: floor.layers, floor,
    notes: { experts: `${text.num_experts} of ${PUBLISHED_EXPERTS} (top-${text.num_experts_per_tok}); everything else at full width` },
    release: random.release,
  };
}
