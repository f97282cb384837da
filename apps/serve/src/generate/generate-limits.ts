import type { LayerLimits } from '@metrale/core';

/** Rows one prefill chunk holds at most; longer prompts run in chunks. */
const PREFILL_CHUNK = 256;

/** Limits for generating `maxTokens` after a prompt, one sequence, `draftK` draft tokens (0: none). */
export function generateLimits(promptTokens: number, maxTokens: number, draftK: number): LayerLimits {
  const maxK = draftK + 1;
  return {
    maxSeqs: 1,
    // Room for every generated token plus one verify step's overhang.
    maxSeqLen: promptTokens + maxTokens + maxK,
    maxBatch: 1,
    maxK,
    maxRows: Math.max(Math.min(promptTokens, PREFILL_CHUNK), maxK),
  };
}
