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
  return acceptGreedyTargets((i) => argmaxRow(logits, vocab, i), k, drafts);
}

/** Greedy acceptance from the k rows' argmax ids (picked on the device): the same as `acceptGreedy`. */
export function acceptGreedyIds(targets: ArrayLike<number>, drafts: ArrayLike<number>): Acceptance {
  if (drafts.length !== targets.length - 1) throw new InvalidArgumentError(`acceptance: ${targets.length} rows need ${targets.length - 1} draft tokens, got ${drafts.length}`);
  return acceptGreedyTargets((i) => targets[i]!, targets.length, drafts);
}

function acceptGreedyTargets(target: (row: number) => number, k: number, drafts: ArrayLike<number>): Acceptance {
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

/** `probs` scaled to sum to 1 (f64 sum, in place); a row of no mass is left as it is. */
function normalized(probs: Float32Array): Float32Array {
  const total = massOf(probs);
  if (total > 0) for (let i = 0; i < probs.length; i++) probs[i] = probs[i]! / total;
  return probs;
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

export interface RejectionOptions {
  readonly temperature: number;
  readonly random: SeededRandom;
  /** Applied to each row's probabilities (top-k / top-p / min-p); identity by default. */
  readonly transform?: ProbabilityTransform;
  /**
   * The drafter's probability of each draft (length k − 1, for each its full distribution of
   * `vocab` entries). Absent: a deterministic drafter (n-gram), a point mass on each draft.
   */
  readonly draftProbs?: readonly Float32Array[];
}

/**
 * Rejection sampling (Leviathan et al.; Chen et al.): accept draft x with probability
 * min(1, p(x)/q(x)); on rejection, draw from the residual max(0, p − q) renormalised. The output
 * is distributed exactly as sampling the target token by token.
 */
export function acceptRejection(logits: Float32Array, vocab: number, drafts: ArrayLike<number>, options: RejectionOptions): Acceptance {
  const k = checkShapes(logits, vocab, drafts);
  const { temperature, random, transform, draftProbs } = options;
  if (draftProbs && draftProbs.length !== k - 1) throw new InvalidArgumentError(`acceptRejection: ${k - 1} drafts need ${k - 1} draft distributions, got ${draftProbs.length}`);
  for (let i = 0; i < k - 1; i++) {
    const p = targetProbs(logits, vocab, i, temperature, transform);
    const x = drafts[i]!;
    const q = draftProbs?.[i];
    const qx = q ? q[x]! : 1;
    const ratio = qx > 0 ? Math.min(1, p[x]! / qx) : 1;
    if (random.float() < ratio) continue;
    return { accepted: i + 1, next: sampleFrom(residualProbs(p, x, q), random) };
  }
  // The last row as plain sampling draws from it (the draw scales by the kept mass), so a sequence
  // without drafts in a verify step draws the token a decode step would.
  const last = softmaxRow(logits, vocab, k - 1, temperature);
  return { accepted: k, next: sampleFrom(transform ? transform(last) : last, random) };
}

/**
 * Row `r`'s target distribution as rejection sampling takes it: the softmax at `temperature`, then
 * `transform` (top-k, top-p, min-p), the kept mass renormalised to 1 (a filter zeroes what it drops
 * and leaves the rest as it was; the ratio and the residual need the target as sampling gives it).
 * With a point-mass drafter, a draft x is accepted with probability p[x].
 */
export function targetProbs(logits: Float32Array, vocab: number, r: number, temperature: number, transform?: ProbabilityTransform): Float32Array {
  const p = softmaxRow(logits, vocab, r, temperature);
  return transform ? normalized(transform(p)) : p;
}

/** What a rejected draft x leaves to draw from: max(0, p − q), q a point mass on x when absent (p with x zeroed). */
export function residualProbs(p: Float32Array, x: number, q?: Float32Array): Float32Array {
  const residual = new Float32Array(p.length);
  for (let j = 0; j < p.length; j++) residual[j] = Math.max(0, p[j]! - (q ? q[j]! : j === x ? 1 : 0));
  return residual;
}
