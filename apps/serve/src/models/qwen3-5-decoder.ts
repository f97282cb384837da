import { type ModelBuildContext, type ModelStack } from '@metrale/core';
import { buildQwenHybridDecoder } from './qwen-hybrid-decoder.js';
import { qwen35TextConfig, type Qwen35Family } from './qwen3-5-config.js';
import { qwen35TextWeights } from './qwen3-5-weights.js';
import { qwen35ShardRule } from './qwen3-5-sharding.js';
import { isMultimodalConfig, textConfigWhere } from './text-config.js';

/**
 * A Qwen3.5 text model (`Qwen3_5TextModel` / `Qwen3_5MoeTextModel` and their lm head), from either
 * checkpoint layout: the published vision-language one (`text_config`, `model.language_model.*`,
 * the vision tower and the MTP layer left unread) or the text-only one (`model.*`). The math is
 * Qwen3-Next's: per layer `x += mixer(input_layernorm(x))`, `x += mlp(post_attention_layernorm(x))`
 * with (1 + w) RMSNorms; the mixer Gated DeltaNet (`linear_attn.*` with the split `in_proj_qkv` /
 * `in_proj_z` / `in_proj_b` / `in_proj_a`, regrouped by layer-gdn, or whichever plugin provides
 * 'gdn') or gated full attention (`self_attn.*`: q_proj's per-head [q | gate], q/k norms, partial
 * RoPE; token-only positions are the same in M-RoPE's three sections, so it is plain 1-D RoPE);
 * the feed-forward a dense SwiGLU (`family` 'dense') or, in every layer, a MoE with softmax top-k
 * always renormalised and a sigmoid-gated shared expert ('moe', experts fused as published or
 * per expert). Tensor and expert parallelism split it as Qwen3-Next's (`qwen3NextShardRule` takes
 * the split projections).
 */
export function buildQwen35(ctx: ModelBuildContext, family: Qwen35Family): ModelStack {
  const text = qwen35TextConfig(ctx.config, family);
  return buildQwenHybridDecoder({ ...ctx, config: text, weights: qwen35TextWeights(ctx.weights, isMultimodalConfig(ctx.config)) }, {
    text, where: textConfigWhere(ctx.config), shardRule: qwen35ShardRule(ctx.config, family),
    types: (config) => config.layer_types as readonly string[], isMoe: () => family === 'moe', label: String(ctx.config.model_type),
  });
}
