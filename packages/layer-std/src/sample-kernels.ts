import { defineKernel, type LaunchConfig, type Stream } from '@metrale/core';
import { argmaxCpu, logprobsCpu, sampleCpu } from './sample.cpu.js';
import { SAMPLE_PHASE_DRAW } from './sample-layout.js';
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
 * `std.sample` (kernels/std-sample.cu): each row by its own parameters and draw (`params` f64
 * [rows][SAMPLE_PARAMS], the host's values unrounded: temperature, top-k as a whole number (0: off),
 * top-p (1: off), min-p (0: off), a uniform in [0, 1)); a row of temperature ≤ 0 takes its argmax,
 * the token `std.argmax` gives. Launched once per phase of `samplePhases` on `sampleLaunch`'s CTAs (a row cut into
 * SAMPLE_SLICE-logit slices), with `scratch` of `sampleScratchBytes(capacity, vocab)` (its first
 * `sampleScratchZeroBytes(capacity)` zero before the first launch; each launch leaves them zero).
 * `out` holds the ids after the last phase. The CPU twin picks a greedy row at phase 0 and a
 * sampled one at the draw phase; the phases between only fill the CUDA kernel's scratch.
 */
export const sampleKernel = defineKernel({
  name: 'std.sample',
  params: { logits: 'ptr', params: 'ptr', out: 'ptr', scratch: 'ptr', capacity: 'i32', rows: 'i32', vocab: 'i32', phase: 'i32' },
  cuda: { module, symbol: 'std_sample' },
  cpu: sampleCpu,
});

/**
 * `std.logprobs` (kernels/std-sample.cu): a row whose `counts[r]` (i32) is n ≥ 0 writes row r of
 * `out` (u32 [rows][LOGPROBS_ROW_WORDS], src/sample-layout.ts): log Σ exp of its logits (f64), the
 * logit of its token `tokens[r]` (f32 bits) and that token's rank (#{logits ≥ it}), then
 * min(n, LOGPROBS_TOP, vocab) and as many (token, logit f32 bits) pairs, the most likely first,
 * lower ids first on ties; a row of n < 0 is left as it was. One launch on `sampleLaunch`'s CTAs
 * with `std.sample`'s scratch (free again once `std.sample`'s last phase has run). A token's logprob
 * is its logit less the f64 lse (core's positionLogprobs; the kernel's lse differs from it in its
 * last bits).
 */
export const logprobsKernel = defineKernel({
  name: 'std.logprobs',
  params: { logits: 'ptr', tokens: 'ptr', counts: 'ptr', out: 'ptr', scratch: 'ptr', capacity: 'i32', rows: 'i32', vocab: 'i32' },
  cuda: { module, symbol: 'std_logprobs' },
  cpu: logprobsCpu,
});

/** Logits of a slice of `std.sample` / `std.logprobs` (kSampleSlice): fixed, so a row's sums and token do not depend on its batch. */
export const SAMPLE_SLICE = 4096;
/** Threads of a `std.sample` / `std.logprobs` CTA. */
const SAMPLE_THREADS = 256;
/** Entries a slice keeps at most in a row's pool (kPoolMax) and the pool's margin over top-k (kPoolMargin). */
const SAMPLE_POOL = 512;
const SAMPLE_POOL_MARGIN = 16;
/** The largest top-k a row's pool serves; past it the top-k digit passes find the row's cut-off. */
export const SAMPLE_POOLED_TOP_K = SAMPLE_POOL - SAMPLE_POOL_MARGIN;
/** Bins of a digit pass (kDigitBins). */
const SAMPLE_DIGIT_BINS = 2048;
/** Bytes of the kernel's per-row record (SampleRow) and per-slice record (SampleSlice). */
const SAMPLE_ROW_BYTES = 48;
const SAMPLE_SLICE_BYTES = 40;
/** Slices of a row of `vocab` logits. */
export function sampleSlices(vocab: number): number {
  return Math.ceil(vocab / SAMPLE_SLICE);
}

/** `std.sample`'s and `std.logprobs`' CTAs: [sampleSlices, rows] of 256 threads. */
export function sampleLaunch(rows: number, vocab: number, stream: Stream): LaunchConfig {
  return { grid: [sampleSlices(vocab), Math.min(Math.max(1, rows), 65_535)], block: SAMPLE_THREADS, stream };
}

/** The leading bytes of the scratch that must be zero before its first launch: a digit histogram (u64 [2048]) and a counter (u32) a row. */
export function sampleScratchZeroBytes(capacity: number): number {
  return 8 * SAMPLE_DIGIT_BINS * capacity + 8 * Math.ceil((4 * capacity) / 8);
}

/** Bytes of the kernels' scratch for up to `capacity` rows of `vocab`: the zeroed part, then the rows', slices' and pools' records. */
export function sampleScratchBytes(capacity: number, vocab: number): number {
  return sampleScratchZeroBytes(capacity) + capacity * (SAMPLE_ROW_BYTES + sampleSlices(vocab) * (SAMPLE_SLICE_BYTES + 8 * SAMPLE_POOL));
}

/** A row of a `std.sample` call as its phases see it. */
export interface SamplePhaseRow {
  readonly temperature: number;
  readonly topK: number;
  readonly topP: number;
}

/**
 * The phases a `std.sample` call launches, in order: the slices always; the top-k digit passes (1–3)
 * when a sampled row's top-k is past the pools' reach (SAMPLE_POOLED_TOP_K); the top-p digit passes
 * (4–6) when a sampled row has top-p (a row whose cut-off the slices' phase found leaves them at
 * once); the draw when a row is sampled.
 */
export function samplePhases(rows: readonly SamplePhaseRow[]): number[] {
  const sampled = rows.filter((r) => r.temperature > 0);
  const topK = sampled.some((r) => r.topK > SAMPLE_POOLED_TOP_K);
  const topP = sampled.some((r) => r.topP < 1);
  return [0, ...(topK ? [1, 2, 3] : []), ...(topP ? [4, 5, 6] : []), ...(sampled.length ? [SAMPLE_PHASE_DRAW] : [])];
}

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
