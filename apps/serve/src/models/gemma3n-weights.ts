import type { WeightSource } from '@metrale/core';
import { languageModelWeights } from './language-model-weights.js';

/** The tensors of a published Gemma 3n checkpoint that its text model never reads: the towers and their token embedders. */
const UNREAD_PREFIXES = ['model.vision_tower.', 'model.audio_tower.', 'model.embed_vision.', 'model.embed_audio.'] as const;

/** Whether a Gemma 3n checkpoint's tensor (full name) is one the text model never reads. */
export function gemma3nUnreadTensor(name: string): boolean {
  return UNREAD_PREFIXES.some((p) => name.startsWith(p));
}

/** A Gemma 3n checkpoint's text-model tensors under `gemma3n_text`'s names (`model.*`), whichever layout it has. */
export function gemma3nTextWeights(source: WeightSource, multimodal: boolean): WeightSource {
  return languageModelWeights(source, multimodal, gemma3nUnreadTensor);
}
