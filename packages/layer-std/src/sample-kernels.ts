import { defineKernel, type LaunchConfig, type Stream } from '@metrale/core';
import { argmaxCpu, logprobsCpu, sampleCpu } from './sample.cpu.js';
import { sampleModule as module } from './std-modules.js';

/**
 * `std.argmax` (kernels/std-sample.cu): each row's token, the lowest index of its maximum. CTAs
 * [slices, rows] (`argmaxLaunch`), each the best (value, index) pair of one slice of its row; the
 * last of a row's CTAs to finish merges the slices' pairs. Scratch, needed at more than one slice:
 * `counters` u32 [rows], zero before a launch and after it (the last CTA of a row resets its
 * counter, so a graph replay needs no memset), and `partials` (`argmaxPartialsBytes`). The token
 * does not depend on the slicing.
 */
export const argmaxKernel = defineKernel({
  name: 'std.argmax',
  params: { logits: 'ptr', out: 'ptr', counters: 'ptr', partials: 'ptr', rows: 'i32', vocab: 'i32' },
  cuda: { module, symbol: 'std_argmax' },
  cpu: argmaxCpu,
});

/**
 * `std.sample` (kernels/std-sample.cu): one CTA of 1 024 threads a row, each row by its own
 * parameters (`params` f64 [rows][SAMPLE_PARAMS], the host's values unrounded: temperature, top-k
 * as a whole number (0: off), top-p (1: off), min-p (0: off), and a draft token under verification
 * (−1: none)) and its draw (`uniforms` f64 [rows] in [0, 1)); a row of temperature ≤ 0 takes its
 * argmax, the token `std.argmax` gives. A sampled row with a draft draws without it (rejection
 * sampling's residual) and writes the draft's probability in its filtered target renormalised to
 * `draftProbs` (f64 [rows]; untouched for rows without a draft).
 */
export const sampleKernel = defineKernel({
  name: 'std.sample',
  params: { logits: 'ptr', params: 'ptr', uniforms: 'ptr', out: 'ptr', draftProbs: 'ptr', rows: 'i32', vocab: 'i32' },
  cuda: { module, symbol: 'std_sample' },
  cpu: sampleCpu,
});

/**
 * `std.logprobs` (kernels/std-sample.cu): one CTA of 1 024 threads a row; a row whose `counts[r]`
 * (i32) is n ≥ 0 writes row r of `out` (u32 [rows][LOGPROBS_ROW_WORDS], src/sample-layout.ts): log Σ exp of its logits
 * (f64), the logit of its token `tokens[r]` (f32 bits) and that token's rank (#{logits ≥ it}), then
 * min(n, LOGPROBS_TOP, vocab) and as many (token, logit f32 bits) pairs, the most likely first,
 * lower ids first on ties; a row of n < 0 is left as it was. A token's logprob is its logit less
 * the f64 lse (core's positionLogprobs; the kernel's lse differs from it in its last bits).
 */
export const logprobsKernel = defineKernel({
  name: 'std.logprobs',
  params: { logits: 'ptr', tokens: 'ptr', counts: 'ptr', out: 'ptr', rows: 'i32', vocab: 'i32' },
  cuda: { module, symbol: 'std_logprobs' },
  cpu: logprobsCpu,
});

/** Threads of a `std.argmax` CTA. */
const ARGMAX_THREADS = 256;
/** Fewest logits worth a CTA of their own: a small slice costs a CTA and a pair to merge and saves no round trip. */
const ARGMAX_MIN_SLICE = 2048;
/** CTAs per multiprocessor `std.argmax` aims at. */
const ARGMAX_CTAS_PER_SM = 2;
/** Bytes of one (value, index) pair of `partials`. */
const ARGMAX_PAIR_BYTES = 8;

/**
 * Slices of each row of `std.argmax`: enough that rows × slices fill about two CTAs per
 * multiprocessor (one row alone is spread over the GPU), none under ARGMAX_MIN_SLICE logits, one
 * when the rows alone fill it.
 */
export function argmaxSlices(rows: number, vocab: number, multiprocessors: number): number {
  const fill = Math.ceil((ARGMAX_CTAS_PER_SM * Math.max(1, multiprocessors)) / Math.max(1, rows));
  return Math.max(1, Math.min(fill, Math.ceil(vocab / ARGMAX_MIN_SLICE)));
}

/** `std.argmax`'s CTAs: [argmaxSlices, rows] of 256 threads. */
export function argmaxLaunch(rows: number, vocab: number, multiprocessors: number, stream: Stream): LaunchConfig {
  return { grid: [argmaxSlices(rows, vocab, multiprocessors), Math.min(Math.max(1, rows), 65_535)], block: ARGMAX_THREADS, stream };
}

/**
 * Bytes of `std.argmax`'s `partials` for every `argmaxLaunch` of up to `maxRows` rows on a device of
 * `multiprocessors`: a pair per (row, slice), and rows × ⌈2M / rows⌉ < 2M + rows.
 */
export function argmaxPartialsBytes(maxRows: number, multiprocessors: number): number {
  return ARGMAX_PAIR_BYTES * (ARGMAX_CTAS_PER_SM * Math.max(1, multiprocessors) + Math.max(1, maxRows));
}
