import type { DevicePtr } from '../device/device-ptr.js';
import type { Stream } from '../device/gpu-backend.js';
import type { PositionLogprobs } from '../model/logprobs.js';
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
  /**
   * The picked token's logprobs with the row's `logprobs` most likely tokens (0 to
   * `MAX_LOGPROBS`), of the row as the model gave it, as `positionLogprobs` computes them; absent:
   * none.
   */
  readonly logprobs?: number;
}

/** What a picker's `sample` gives: each row's token and, for a row that asked, its logprobs. */
export interface SampledTokens {
  readonly tokens: Int32Array;
  /** Row i's logprobs where `rows[i].logprobs` was given, else undefined. */
  readonly logprobs: readonly (PositionLogprobs | undefined)[];
}

/** A row's argmax, with no draw: a greedy sequence's row, or one whose token the caller does not use. */
export const ARGMAX_ROW: SampledRow = Object.freeze({ temperature: 0, topK: 0, topP: 1, minP: 0, uniform: 0 });

/**
 * How `params` pick a row: greedy, `ARGMAX_ROW` (and `draw` is not called); else their filters
 * (absent ones off) and one `draw()`, made as the host sampler makes it. `logprobs`: the count of
 * top logprobs wanted with the token (absent: none).
 */
export function sampledRow(params: SamplingParams | undefined, draw: () => number, logprobs?: number): SampledRow {
  const row = isGreedy(params)
    ? ARGMAX_ROW
    : { temperature: params!.temperature!, topK: params!.topK ?? 0, topP: params!.topP ?? 1, minP: params!.minP ?? 0, uniform: draw() };
  return logprobs === undefined ? row : { ...row, logprobs };
}

/**
 * Picks tokens where the logits are, so a step brings back one id per row (and the logprobs asked
 * for) instead of rows × vocabulary f32 logits, and the host does not scan or sort them. A plugin
 * provides it (layer-std's `DeviceSampler`); the engine loop uses `argmax` for decode and verify
 * steps whose every sequence is plain greedy without logprobs, `sample` for decode steps, finished
 * prompts and verify steps with sampled sequences or logprobs (a verify step's rows each drawn as a
 * decode step would draw it: `acceptMatching`), and reads the logits of sequences with logit
 * adjustments or a constraint.
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
   * The token of each of `rows.length` f32 rows of `vocab` at `logits`, row i picked by `rows[i]`
   * (with its logprobs where `rows[i].logprobs` is given), after `stream`'s work; waits for them. A
   * row's token and logprobs depend on its logits and its `SampledRow` only, not on the other rows.
   */
  sample?(logits: DevicePtr, rows: readonly SampledRow[], vocab: number, stream: Stream): SampledTokens;
}

/**
 * Whether a picker's `sample` may choose a sequence's next token: from its row as the model gave
 * it (no logit adjustments, no constraint mask). Greedy or sampled, with or without logprobs.
 */
export function samplable(s: { readonly adjusted: boolean; readonly constraint?: unknown }): boolean {
  return !s.adjusted && s.constraint === undefined;
}

/** Whether a sequence's next token is its row's argmax and nothing else (no logprobs), so a picker's `argmax` may choose it. */
export function pickable(s: { readonly greedy: boolean; readonly adjusted: boolean; readonly constraint?: unknown; readonly logprobs?: number }): boolean {
  return s.greedy && s.logprobs === undefined && samplable(s);
}
