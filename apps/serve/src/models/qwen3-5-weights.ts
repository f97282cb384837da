import type { WeightSource } from '@metrale/core';
import { languageModelWeights } from './language-model-weights.js';

/** The tensors of a Qwen3.5 checkpoint that its text model never reads. */
const UNREAD_PREFIXES = [
  // The vision tower of the published `Qwen3_5ForConditionalGeneration` checkpoints.
  'model.visual.',
  // The multi-token-prediction layer the published checkpoints carry; Hugging Face ignores it (`^mtp.*`).
  'mtp.',
] as const;

/** Whether a Qwen3.5 checkpoint's tensor (full name) is one the text model never reads: the vision tower or the MTP layer. */
export function qwen35UnreadTensor(name: string): boolean {
  return UNREAD_PREFIXES.some((p) => name.startsWith(p));
}

/**
 * A Qwen3.5 checkpoint's text-model tensors under a text-only checkpoint's names, whichever layout
 * it has (`languageModelWeights`): the vision tower and the MTP layer are not in the view.
 */
export function qwen35TextWeights(source: WeightSource, multimodal: boolean): WeightSource {
  return languageModelWeights(source, multimodal, qwen35UnreadTensor);
}
