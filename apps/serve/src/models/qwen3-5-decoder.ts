import { type ModelBuildContext, type ModelStack } from '@metrale/core';
import {
  buildPreNormDecoder, expertParallelMoe, expertParallelShardRule, qwen3NextAttentionOptions, qwen3NextMoeOptions,
} from '@metrale/layer-std';
import { intField } from './config-fields.js';
import { qwenHybridLayer } from './qwen-hybrid-layer.js';
import { qwen35TextConfig, type Qwen35Family } from './qwen3-5-config.js';
import { qwen35TextWeights } from './qwen3-5-weights.js';
import { qwen35ShardRule } from './qwen3-5-sharding.js';
import { qwen3NextRankConfig } from './qwen3-next-sharding.js';
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
  const parallel = ctx.parallel && ctx.parallel.size > 1 ? ctx.parallel : undefined;
  const ep = parallel?.expertParallel === true;
  const text = qwen35TextConfig(ctx.config, family);
  const config = qwen3NextRankConfig(text, parallel?.size ?? 1, ep, textConfigWhere(ctx.config));
  // Read once, before any layer allocates: a config error names its field without device work.
  const moe = family === 'moe' ? (ep ? expertParallelMoe(qwen3NextMoeOptions(config), parallel!.rank, parallel!.size, 'num_experts') : qwen3NextMoeOptions(config)) : undefined;
  const attention = qwen3NextAttentionOptions(config);
  const hidden = intField(config, 'hidden_size');
  const inter = family === 'dense' ? intField(config, 'intermediate_size') : 0;
  const types = config.layer_types as readonly string[];
  const shard = parallel ? (ep ? expertParallelShardRule(qwen35ShardRule(ctx.config, family)) : qwen35ShardRule(ctx.config, family)) : undefined;
  const textCtx: ModelBuildContext = { ...ctx, config: text, weights: qwen35TextWeights(ctx.weights, isMultimodalConfig(ctx.config)) };
  return buildPreNormDecoder(textCtx, {
    ...(shard ? { shard } : {}),
    hidden,
    vocab: intField(config, 'vocab_size'),
    layerCount: types.length,
    eps: (config.rms_norm_eps as number | undefined) ?? 1e-6,
    normOffset: 1,
    layer: qwenHybridLayer(textCtx, config, types, attention, hidden, () => (moe ? { moe } : { inter }), String(ctx.config.model_type)),
  });
}
