import type { ModelAdapter } from '@metrale/core';
import { buildGemma3n } from './gemma3n-decoder.js';
import { gemma3nUnreadTensor } from './gemma3n-weights.js';

const DESCRIPTION = 'per-layer embeddings, AltUp, Laurel, sliding and full attention with KV sharing, sparse GELU MLPs, soft-capped tied head';

/**
 * Gemma 3n as published (`Gemma3nForConditionalGeneration`, model_type `gemma3n`): its text model
 * from `text_config` and `model.language_model.*`; the vision and audio towers and their embedders
 * are never read. Text prompts only. See `buildGemma3n`.
 */
export const gemma3nAdapter: ModelAdapter = {
  modelType: 'gemma3n',
  description: `Gemma 3n (multimodal checkpoint, its text model served): ${DESCRIPTION}`,
  build: buildGemma3n,
  unreadTensors: () => gemma3nUnreadTensor,
};

/** Gemma 3n text only (`Gemma3nForCausalLM`, model_type `gemma3n_text`): a flat config, tensors under `model.*`, the head tied to the embedding. */
export const gemma3nTextAdapter: ModelAdapter = {
  modelType: 'gemma3n_text',
  description: `Gemma 3n (text only): ${DESCRIPTION}`,
  build: buildGemma3n,
  unreadTensors: () => gemma3nUnreadTensor,
};
