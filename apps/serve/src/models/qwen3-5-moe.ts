import type { ModelAdapter } from '@metrale/core';
import { buildQwen35 } from './qwen3-5-decoder.js';
import { qwen35ShardRule } from './qwen3-5-sharding.js';
import { qwen35UnreadTensor } from './qwen3-5-weights.js';

const DESCRIPTION = 'Gated DeltaNet (split projections) and gated full attention, MoE with a gated shared expert in every layer';

/**
 * Qwen3.5 MoE as published (`Qwen3_5MoeForConditionalGeneration`, model_type `qwen3_5_moe`): its
 * text model from `text_config` and `model.language_model.*` (experts fused:
 * `mlp.experts.gate_up_proj` [E, 2·I, H], `mlp.experts.down_proj` [E, H, I]) with
 * `lm_head.weight`; the vision tower (`model.visual.*`) and the MTP layer (`mtp.*`) are never
 * read. Text prompts only. See `buildQwen35`.
 */
export const qwen35MoeAdapter: ModelAdapter = {
  modelType: 'qwen3_5_moe',
  description: `Qwen3.5 MoE (vision-language checkpoint, its text model served): ${DESCRIPTION}`,
  build: (ctx) => buildQwen35(ctx, 'moe'),
  shardRule: (config) => qwen35ShardRule(config, 'moe'),
  unreadTensors: () => qwen35UnreadTensor,
};

/** Qwen3.5 MoE, text only (`Qwen3_5MoeForCausalLM`, model_type `qwen3_5_moe_text`): a flat config, tensors under `model.*`. */
export const qwen35MoeTextAdapter: ModelAdapter = {
  modelType: 'qwen3_5_moe_text',
  description: `Qwen3.5 MoE (text only): ${DESCRIPTION}`,
  build: (ctx) => buildQwen35(ctx, 'moe'),
  shardRule: (config) => qwen35ShardRule(config, 'moe'),
  unreadTensors: () => qwen35UnreadTensor,
};
