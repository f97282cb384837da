import type { DevicePtr } from '../device/device-ptr.js';
import type { Stream } from '../device/gpu-backend.js';

/**
 * Picks greedy tokens where the logits are, so a step brings back one id per row instead of
 * rows × vocabulary f32 logits (and the host does not scan them). A plugin provides it (layer-std's
 * `DeviceSampler`); the engine loop uses it for decode and verify steps whose every sequence is
 * plain greedy (no logprobs, no logit adjustments, no constraint), and reads the logits otherwise.
 */
export interface DeviceTokenPicker {
  /** The most rows one call takes. */
  readonly maxRows: number;
  /** The index of each of `rows` f32 rows of `vocab` at `logits` holding its maximum (the lowest on ties), after `stream`'s work. */
  argmax(logits: DevicePtr, rows: number, vocab: number, stream: Stream): Int32Array;
}

/** Whether a sequence's next token is its row's argmax and nothing else, so a picker may choose it. */
export function pickable(s: { readonly greedy: boolean; readonly adjusted: boolean; readonly constraint?: unknown; readonly logprobs?: number }): boolean {
  return s.greedy && !s.adjusted && s.constraint === undefined && s.logprobs === undefined;
}
