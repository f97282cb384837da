import { InvalidArgumentError } from '../errors.js';
import type { SeededRandom } from '../random/seeded-random.js';

/**
 * Speculative acceptance for one sequence. A verify step feeds k rows: the last committed token,
 * then k − 1 draft tokens. Row i's logits predict the token after row i, so draft i + 1 is checked
 * against row i. `accepted` rows (1..k) become history; `next` is the token that follows them
 * (the target's correction, or its bonus token when every draft was accepted).
 */
export interface Acceptance {
  readonly accepted: number;
  readonly next: number;
}

function checkShapes(logits: Float32Array, vocab: number, drafts: ArrayLike<number>): number {
  if (!Number.isInteger(vocab) || vocab < 1 || logits.length % vocab !== 0) {
    throw new InvalidArgumentError(`acceptance: logits of length ${logits.length} are not rows of vocab ${vocab}`);
  }
  const k = logits.length / vocab;
  if (drafts.length !== k - 1) throw new InvalidArgumentError(`acceptance: ${k} logit rows need ${k - 1} draft tokens, got ${drafts.length}`);
  for (let i = 0; i < drafts.length; i++) {
    const d = drafts[i]!;
    if (!Number.isInteger(d) || d < 0 || d >= vocab) throw new InvalidArgumentError(`acceptance: draft token ${d} at ${i} is outside the vocabulary (${vocab})`);
  }
  return k;
}

/** Index of the largest logit of row `r` (lowest index on ties, as torch.argmax). */
export function argmaxRow(logits: Float32Array, vocab: number, r: number): number {
  let best = 0;
  let bestV = -Infinity;
  const base = r * vocab;
  for (let i = 0; i < vocab; i++) {
    const v = logits[base + i]!;
    if (v > bestV) {
      bestV = v;
      best = i;
    }
  }
  return best;
}

/** Greedy: accept drafts while they equal the target's argmax. */
export function acceptGreedy(logits: Float32Array, vocab: number, drafts: ArrayLike<number>): Acceptance {
  const k = checkShapes(logits, vocab, drafts);
  return acceptMatching((i) => argmaxRow(logits, vocab, i), k, drafts);
}

/** Acceptance from the k rows' tokens picked on the device (argmax, or drawn as `acceptMatching` says): the same as on the host. */
export function acceptPickedIds(targets: ArrayLike<number>, drafts: ArrayLike<number>): Acceptance {
  if (drafts.length !== targets.length - 1) throw new InvalidArgumentError(`acceptance: ${targets.length} rows need ${targets.length - 1} draft tokens, got ${drafts.length}`);
  return acceptMatching((i) => targets[i]!, targets.length, drafts);
}

/**
 * Acceptance by matching: row i's token is `target(i)`, asked in row order and only up to the
 * first draft that differs from it; drafts are kept while they equal it. Greedy: the row's argmax.
 * Sampled: the row's token as plain sampling draws it, with the sequence's next draw. So a sampled
 * sequence emits exactly the tokens its decode steps would, one draw per emitted token whatever a
 * step verifies, and a point-mass draft (n-gram) is kept with probability p(draft), as rejection
 * sampling (Leviathan et al.) keeps it, the token after a rejected one drawn from the rest.
 */
export function acceptMatching(target: (row: number) => number, k: number, drafts: ArrayLike<number>): Acceptance {
  for (let i = 0; i < k - 1; i++) {
    const t = target(i);
    if (t !== drafts[i]) return { accepted: i + 1, next: t };
  }
  return { accepted: k, next: target(k - 1) };
}

/** Turns a logit row into probabilities at `temperature`, optionally through a filter (top-k, top-p...). */
export type ProbabilityTransform = (row: Float32Array) => Float32Array;

export function softmaxRow(logits: Float32Array, vocab: number, r: number, temperature: number): Float32Array {
  if (!(temperature > 0)) throw new InvalidArgumentError(`temperature must be > 0 for sampling, got ${temperature}`);
  const out = new Float32Array(vocab);
  const base = r * vocab;
  let max = -Infinity;
  for (let i = 0; i < vocab; i++) max = Math.max(max, logits[base + i]!);
  let sum = 0;
  for (let i = 0; i < vocab; i++) {
    const e = Math.exp((logits[base + i]! - max) / temperature);
    out[i] = e;
    sum += e;
  }
  for (let i = 0; i < vocab; i++) out[i]! /= sum;
  return out;
}

/** Draws an index from a probability vector (which need not be normalised). */
export function sampleFrom(probs: Float32Array, random: SeededRandom): number {
  const total = massOf(probs);
  if (!(total > 0)) throw new InvalidArgumentError('sampleFrom: the distribution has no mass');
  return inverseCdf(probs, total, random.float());
}

/**
 * The index `sampleFrom` draws when its draw is `u01` (in [0, 1)): the inverse CDF at u01 · Σp, in
 * index order; the last index of non-zero mass where rounding runs past the end (0 for no mass).
 * The one definition a device sampler given the same draw must match.
 */
export function pickAt(probs: Float32Array, u01: number): number {
  return inverseCdf(probs, massOf(probs), u01);
}

function massOf(probs: Float32Array): number {
  let total = 0;
  for (let i = 0; i < probs.length; i++) total += probs[i]!;
  return total;
}

function inverseCdf(probs: Float32Array, total: number, u01: number): number {
  let u = u01 * total;
  let last = 0;
  for (let i = 0; i < probs.length; i++) {
    const p = probs[i]!;
    if (p > 0) last = i;
    if (u < p) return i;
    u -= p;
  }
  return last;
}
