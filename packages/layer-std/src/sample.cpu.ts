import { logSumExp, pickAt, positionLogprobs, probabilityFilter, softmaxRow, type CpuKernelContext } from '@metrale/core';
import { LOGPROBS_HEAD, LOGPROBS_ROW_WORDS, LOGPROBS_TOP, SAMPLE_PARAMS, SAMPLE_PHASE_DRAW } from './sample-layout.js';

// CPU reference of kernels/std-sample.cu: the token of each logit row, greedy or sampled with a
// uniform draw the host supplies, by exactly the rules of core's host sampler (sampling.ts), so a
// device sampler and the host give the same token for the same draw.

interface RowsArgs {
  readonly logits: bigint;
  readonly out: bigint;
  readonly rows: number;
  readonly vocab: number;
}

export interface ArgmaxArgs extends RowsArgs {
  /** The CUDA kernel's scratch across a row's slices; the twin needs none. */
  readonly counters: bigint;
  readonly partials: bigint;
}

/** out[r] = argmax of row r, lowest index on ties (torch.argmax). NaN never wins; a row of −∞ and NaN gives 0. */
export function argmaxCpu(a: ArgmaxArgs, { mem }: CpuKernelContext): void {
  const logits = mem.f32(a.logits, a.rows * a.vocab);
  const out = mem.i32(a.out, a.rows);
  for (let r = 0; r < a.rows; r++) {
    let best = 0;
    let bestV = -Infinity;
    for (let i = 0; i < a.vocab; i++) {
      const v = logits[r * a.vocab + i]!;
      if (v > bestV) {
        bestV = v;
        best = i;
      }
    }
    out[r] = best;
  }
}

export interface SampleArgs extends RowsArgs {
  /** f64 [rows][SAMPLE_PARAMS]: each row's temperature (≤ 0: its argmax), top-k (0: off), top-p (1: off), min-p (0: off) and uniform draw in [0, 1) (the host's, unrounded). */
  readonly params: bigint;
  /** The CUDA kernel's scratch across a row's slices and phases; the twin needs none. */
  readonly scratch: bigint;
  readonly capacity: number;
  /** The phase launched (`samplePhases`): the twin picks greedy rows at 0 and sampled rows at the draw. */
  readonly phase: number;
}

/**
 * Probabilities of one row at a temperature, filtered by top-k, top-p, min-p (ties at a cut-off
 * kept): core's host sampler's own softmax and filters (`softmaxRow`, `probabilityFilter`), so the
 * twin is the host's rules by construction.
 */
export function filteredProbs(row: Float32Array, temperature: number, topK: number, topP: number, minP: number): Float32Array {
  const p = softmaxRow(row, row.length, 0, temperature);
  const filter = probabilityFilter({ topK, topP, minP });
  return filter ? filter(p) : p;
}

export function sampleCpu(a: SampleArgs, ctx: CpuKernelContext): void {
  const { mem } = ctx;
  const logits = mem.f32(a.logits, a.rows * a.vocab);
  const params = mem.f64(a.params, SAMPLE_PARAMS * a.rows);
  const out = mem.i32(a.out, a.rows);
  for (let r = 0; r < a.rows; r++) {
    const [temperature, topK, topP, minP, uniform] = params.subarray(SAMPLE_PARAMS * r, SAMPLE_PARAMS * (r + 1));
    if (a.phase !== (temperature! > 0 ? SAMPLE_PHASE_DRAW : 0)) continue;
    if (!(temperature! > 0)) {
      argmaxCpu({ logits: a.logits + BigInt(4 * r * a.vocab), out: a.out + BigInt(4 * r), counters: 0n, partials: 0n, rows: 1, vocab: a.vocab }, ctx);
      continue;
    }
    const row = logits.subarray(r * a.vocab, (r + 1) * a.vocab);
    out[r] = pickAt(filteredProbs(row, temperature!, Math.trunc(topK!), topP!, minP!), uniform!);
  }
}

export interface LogprobsArgs extends RowsArgs {
  /** i32 [rows]: each row's picked token. */
  readonly tokens: bigint;
  /** i32 [rows]: top logprobs a row wants (< 0: none, its row of `out` untouched). */
  readonly counts: bigint;
  /** The CUDA kernel's scratch; the twin needs none. */
  readonly scratch: bigint;
  readonly capacity: number;
}

/** Each asking row's lse, its token's logit and rank, and its top pairs, by core's `positionLogprobs`. */
export function logprobsCpu(a: LogprobsArgs, { mem }: CpuKernelContext): void {
  const logits = mem.f32(a.logits, a.rows * a.vocab);
  const tokens = mem.i32(a.tokens, a.rows);
  const counts = mem.i32(a.counts, a.rows);
  for (let r = 0; r < a.rows; r++) {
    const n = counts[r]!;
    if (n < 0) continue;
    const at = a.out + BigInt(4 * LOGPROBS_ROW_WORDS * r);
    const words = mem.u32(at, LOGPROBS_ROW_WORDS);
    const bits = new Float32Array(words.buffer, words.byteOffset, LOGPROBS_ROW_WORDS);
    const token = tokens[r]!;
    const p = positionLogprobs(logits, a.vocab, r, token, Math.min(n, LOGPROBS_TOP));
    mem.f64(at, 1)[0] = logSumExp(logits, a.vocab, r);
    bits[2] = logits[r * a.vocab + token]!;
    words[3] = p.rank;
    words[4] = p.top.length;
    words[5] = 0;
    p.top.forEach((t, j) => {
      words[LOGPROBS_HEAD + 2 * j] = t.token;
      bits[LOGPROBS_HEAD + 2 * j + 1] = logits[r * a.vocab + t.token]!;
    });
  }
}
