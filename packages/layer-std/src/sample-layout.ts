import { MAX_LOGPROBS, type PositionLogprobs } from '@metrale/core';

// The layouts of the token-selection kernels' per-row buffers (kernels/std-sample.cu), shared by
// the CUDA launches, their CPU twins and the host that reads them back.

/** f64 values of a row in `std.sample`'s `params`: temperature, top-k, top-p, min-p, and the row's uniform draw in [0, 1). */
export const SAMPLE_PARAMS = 5;
/** `std.sample`'s last phase, the draw (kPhaseDraw): 0 is the slices, 1 to 3 the top-k digit passes, 4 to 6 the top-p ones. */
export const SAMPLE_PHASE_DRAW = 7;

// `std.logprobs`' output, one row of u32 words a picked row: a head — the row's log-normalizer
// (f64, words 0–1), the picked token's logit (f32 bits), its rank, the count of pairs, one unused
// word — then up to LOGPROBS_TOP (token, logit f32 bits) pairs.

/** Top logprobs a row reports at most (kernels/std-sample.cu's kLogprobsTop). */
export const LOGPROBS_TOP = MAX_LOGPROBS;
/** u32 words before a row's pairs. */
export const LOGPROBS_HEAD = 6;
/** u32 words of one row (an even count: each row's f64 stays 8-byte aligned). */
export const LOGPROBS_ROW_WORDS = LOGPROBS_HEAD + 2 * LOGPROBS_TOP;

/**
 * Row `r` of a `std.logprobs` output copied to the host at `bytes`, as core's `positionLogprobs`
 * reports it for `token`: each logprob its logit less the row's log-normalizer, in f64.
 */
export function readLogprobsRow(bytes: Uint8Array, r: number, token: number): PositionLogprobs {
  const at = bytes.byteOffset + 4 * LOGPROBS_ROW_WORDS * r;
  const words = new Uint32Array(bytes.buffer, at, LOGPROBS_ROW_WORDS);
  const values = new Float32Array(bytes.buffer, at, LOGPROBS_ROW_WORDS);
  const lse = new Float64Array(bytes.buffer, at, 1)[0]!;
  const top = Array.from({ length: words[4]! }, (_, j) => ({ token: words[LOGPROBS_HEAD + 2 * j]!, logprob: values[LOGPROBS_HEAD + 2 * j + 1]! - lse }));
  return { token, logprob: values[2]! - lse, rank: words[3]!, top };
}
