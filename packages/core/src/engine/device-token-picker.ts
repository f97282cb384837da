import type { DevicePtr } from '../device/device-ptr.js';
import type { Stream } from '../device/gpu-backend.js';

/** Greedy ids a picker enqueued (`DeviceTokenPicker.argmaxAsync`) and has not handed to the host yet. */
export interface PickedTokens {
  /**
   * The ids on the device (one i32 per row), valid in stream order until the picker's next call: a
   * decode step launched before that call may take them as its input (`StepInput.deviceTokens`).
   */
  readonly device: DevicePtr;
  /** Waits for the ids' copy to the host and returns them; once. */
  read(): Int32Array;
}

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
  /**
   * The same ids without waiting: the argmax and the copy back are enqueued on `stream`, and the
   * host reads them later. With it the engine loop launches the next decode step (its input the
   * ids on the device) before it reads this one's, so the host's work overlaps the device's. A
   * picker keeps at least two calls' host copies apart: a call's ids stay readable until the call
   * after next.
   */
  argmaxAsync?(logits: DevicePtr, rows: number, vocab: number, stream: Stream): PickedTokens;
}

/** Whether a sequence's next token is its row's argmax and nothing else, so a picker may choose it. */
export function pickable(s: { readonly greedy: boolean; readonly adjusted: boolean; readonly constraint?: unknown; readonly logprobs?: number }): boolean {
  return s.greedy && !s.adjusted && s.constraint === undefined && s.logprobs === undefined;
}
