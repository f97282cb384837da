import type { DevicePtr } from '../device/device-ptr.js';
import type { Stream } from '../device/gpu-backend.js';
import { isGreedy, type SamplingParams } from '../model/sampling.js';

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
 * How a picker chooses one row's token (`DeviceTokenPicker.sample`): temperature 0, the row's
 * argmax; else the softmax at `temperature`, then top-k (0: off), top-p (1: off), min-p (0: off) as
 * `probabilityFilter` applies them, then the inverse CDF at `uniform` (a draw in [0, 1) of the
 * sequence's random stream, made on the host in the order the host sampler draws).
 */
export interface SampledRow {
  readonly temperature: number;
  readonly topK: number;
  readonly topP: number;
  readonly minP: number;
  readonly uniform: number;
}

/** A row's argmax, with no draw: a greedy sequence's row, or one whose token the caller does not use. */
export const ARGMAX_ROW: SampledRow = Object.freeze({ temperature: 0, topK: 0, topP: 1, minP: 0, uniform: 0 });

/**
 * How `params` pick a row: greedy, `ARGMAX_ROW` (and `draw` is not called); else their filters
 * (absent ones off) and one `draw()`, made as the host sampler makes it.
 */
export function sampledRow(params: SamplingParams | undefined, draw: () => number): SampledRow {
  if (isGreedy(params)) return ARGMAX_ROW;
  const p = params!;
  return { temperature: p.temperature!, topK: p.topK ?? 0, topP: p.topP ?? 1, minP: p.minP ?? 0, uniform: draw() };
}

/**
 * Picks tokens where the logits are, so a step brings back one id per row instead of rows ×
 * vocabulary f32 logits (and the host does not scan or sort them). A plugin provides it
 * (layer-std's `DeviceSampler`); the engine loop uses `argmax` for decode and verify steps whose
 * every sequence is plain greedy, `sample` for decode steps with sampled sequences, and reads the
 * logits of sequences with logprobs, logit adjustments or a constraint.
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
  /**
   * The token of each of `rows.length` f32 rows of `vocab` at `logits`, row i picked by `rows[i]`,
   * after `stream`'s work; waits for them. A row's token depends on its logits and its `SampledRow`
   * only, not on the other rows.
   */
  sample?(logits: DevicePtr, rows: readonly SampledRow[], vocab: number, stream: Stream): Int32Array;
}

/**
 * Whether a picker's `sample` may choose a sequence's next token: from its row as the model gave
 * it (no logit adjustments, no constraint mask) and without its logprobs. Greedy or sampled.
 */
export function samplable(s: { readonly adjusted: boolean; readonly constraint?: unknown; readonly logprobs?: number }): boolean {
  return !s.adjusted && s.constraint === undefined && s.logprobs === undefined;
}

/** Whether a sequence's next token is its row's argmax and nothing else, so a picker may choose it. */
export function pickable(s: { readonly greedy: boolean; readonly adjusted: boolean; readonly constraint?: unknown; readonly logprobs?: number }): boolean {
  return s.greedy && samplable(s);
}
