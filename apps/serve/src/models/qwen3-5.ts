import type { ModelAdapter } from '@metrale/core';
import { buildQwen35 } from './qwen3-5-decoder.js';
import { qwen35ShardRule } from './qwen3-5-sharding.js';
import { qwen35UnreadTensor } from './qwen3-5-weights.js';

const DESCRIPTION = 'Gated DeltaNet (split projections) and gated full attention, a dense SwiGLU MLP in every layer';

/**
 * Qwen3.5 dense as published (`Qwen3_5ForConditionalGeneration`, model_type `qwen3_5`): its text
 * model from `text_config` and `model.language_model.*` with `lm_head.weight` (tied to the text
 * embedding when the top-level `tie_word_embeddings` says so); the vision tower (`model.visual.*`)
 * and the MTP layer (`mtp.*`) are never read. Text prompts only. See `buildQwen35`.
 */
export const qwen35Adapter: ModelAdapter = {
  modelType: 'qwen3_5',
  description: `Qwen3.5 (vision-language checkpoint, its text model served): ${DESCRIPTION}`,
  build: (ctx) => buildQwen35(ctx, 'dense'),
  shardRule: (config) => qwen35ShardRule(config, 'dense'),
  unreadTensors: () => qwen35UnreadTensor,
};

/** Qwen3.5 dense, text only (`Qwen3_5ForCausalLM`, model_type `qwen3_5_text`): a flat config, tensors under `model.*`, tied embeddings when the config says so. */
export const qwen35TextAdapter: ModelAdapter = {
  modelType: 'qwen3_5_text',
  description: `Qwen3.5 (text only): ${DESCRIPTION}`,
  build: (ctx) => buildQwen35(ctx, 'dense'),
  shardRule: (config) => qwen35ShardRule(config, 'dense'),
  unreadTensors: () => qwen35UnreadTensor,
};
