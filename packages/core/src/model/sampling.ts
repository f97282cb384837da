import { argmaxRow, sampleFrom, softmaxRow, type ProbabilityTransform } from '../driver/acceptance.js';
import { InvalidArgumentError } from '../errors.js';
import type { Seed, SeededRandom } from '../random/seeded-random.js';

/**
 * How a sequence picks its next token. Temperature 0 (the default) is greedy. The logit bias, the
 * min-tokens mask and the penalties change the logits first, greedy or not (logits-adjustment.ts).
 */
export interface SamplingParams {
  readonly temperature?: number;
  /** Keep the k most likely tokens; 0 or absent: off. */
  readonly topK?: number;
  /** Keep the most likely tokens whose probabilities add up to p; 1 or absent: off. */
  readonly topP?: number;
  /** Keep tokens at least `minP` times as likely as the most likely one; 0 or absent: off. */
  readonly minP?: number;
  /** Seed of the sequence's random stream (any integer, 64 bits counted); absent: a random one. */
  readonly seed?: Seed;
  /** Added to a token's logit (OpenAI's logit_bias), by token id. */
  readonly logitBias?: ReadonlyMap<number, number>;
  /** Subtracted once from the logit of every token the output holds (OpenAI's definition), in [-2, 2]. */
  readonly presencePenalty?: number;
  /** Subtracted from a token's logit once per time the output holds it, in [-2, 2]. */
  readonly frequencyPenalty?: number;
  /** Divides the positive logits, and multiplies the others, of the tokens in the prompt or the output; > 0, 1: off. */
  readonly repetitionPenalty?: number;
  /** The request's stop tokens cannot be generated before this many tokens are. */
  readonly minTokens?: number;
}

export function isGreedy(p: SamplingParams | undefined): boolean {
  return !p || !(p.temperature !== undefined && p.temperature > 0);
}

/** Throws `InvalidArgumentError` naming the parameter that is out of range. */
export function checkSampling(p: SamplingParams): void {
  const bad = (what: string, v: unknown, range: string): never => {
    throw new InvalidArgumentError(`sampling: ${what} must be ${range}, got ${String(v)}`);
  };
  if (p.temperature !== undefined && !(Number.isFinite(p.temperature) && p.temperature >= 0)) bad('temperature', p.temperature, 'a number ≥ 0');
  if (p.topK !== undefined && !(Number.isInteger(p.topK) && p.topK >= 0)) bad('topK', p.topK, 'an integer ≥ 0');
  if (p.topP !== undefined && !(p.topP > 0 && p.topP <= 1)) bad('topP', p.topP, 'in (0, 1]');
  if (p.minP !== undefined && !(p.minP >= 0 && p.minP <= 1)) bad('minP', p.minP, 'in [0, 1]');
  if (p.seed !== undefined && !(typeof p.seed === 'bigint' || Number.isInteger(p.seed))) bad('seed', p.seed, 'an integer');
  for (const name of ['presencePenalty', 'frequencyPenalty'] as const) {
    const v = p[name];
    if (v !== undefined && !(v >= -2 && v <= 2)) bad(name, v, 'in [-2, 2]');
  }
  if (p.repetitionPenalty !== undefined && !(Number.isFinite(p.repetitionPenalty) && p.repetitionPenalty > 0)) bad('repetitionPenalty', p.repetitionPenalty, 'a finite number > 0');
  if (p.minTokens !== undefined && !(Number.isInteger(p.minTokens) && p.minTokens >= 0)) bad('minTokens', p.minTokens, 'an integer ≥ 0');
  for (const [token, bias] of p.logitBias ?? []) {
    if (!(Number.isInteger(token) && token >= 0)) bad('a logitBias token', token, 'a token id');
    if (!Number.isFinite(bias)) bad(`logitBias of token ${token}`, bias, 'a finite number');
  }
}

/** Largest value v such that at least `count` entries of `probs` are ≥ v. */
function cutoff(probs: Float32Array, count: number): number {
  const top = largestValues(probs, (n) => n >= count);
  if (top) return top[count - 1]!;
  const sorted = Float32Array.from(probs).sort();
  return sorted[sorted.length - count]!;
}

/**
 * The entries of `probs` (probabilities) from the largest down to a binade (a power-of-two range of
 * values) such that `enough(count, mass)` holds for the entries at or above it, sorted descending:
 * the prefix of the whole array sorted descending that a scan needs, without sorting all of it (a
 * vocabulary of 151 936 sorted took ~20 ms a row). `mass` is summed per binade, so a caller deciding
 * by mass must check that its scan ends inside the prefix. Undefined where the array holds a NaN
 * or a negative value (the whole sort orders them in a way the binades cannot) or nothing is enough.
 */
function largestValues(probs: Float32Array, enough: (count: number, mass: number) => boolean): Float32Array | undefined {
  const bits = new Uint32Array(probs.buffer, probs.byteOffset, probs.length);
  const count = new Float64Array(256);
  const mass = new Float64Array(256);
  for (let i = 0; i < probs.length; i++) {
    const p = probs[i]!;
    if (!(p >= 0)) return undefined;
    // The exponent of a non-negative float (−0 with +0): binades order as their values.
    const b = (bits[i]! & 0x7fffffff) >>> 23;
    count[b]!++;
    mass[b]! += p;
  }
  let n = 0;
  let m = 0;
  let lowest = -1;
  for (let b = 255; b >= 0; b--) {
    n += count[b]!;
    m += mass[b]!;
    if (enough(n, m)) {
      lowest = b;
      break;
    }
  }
  if (lowest < 0) return undefined;
  const out = new Float32Array(n);
  let k = 0;
  for (let i = 0; i < probs.length; i++) if ((bits[i]! & 0x7fffffff) >>> 23 >= lowest) out[k++] = probs[i]!;
  return out.sort().reverse();
}

/**
 * The top-k, top-p and min-p filters, in Hugging Face's order (after temperature), on a probability
 * row: entries that fail become 0 (the rest is not renormalised; `sampleFrom` need not be). A tie
 * at a cut-off keeps every tied token, so the result never depends on an order of equal values;
 * the device sampler of `@metrale/layer-std` applies the same rule.
 */
export function probabilityFilter(p: SamplingParams): ProbabilityTransform | undefined {
  const topK = p.topK ?? 0;
  const topP = p.topP ?? 1;
  const minP = p.minP ?? 0;
  if (topK === 0 && topP >= 1 && minP === 0) return undefined;
  return (probs: Float32Array): Float32Array => {
    const out = Float32Array.from(probs);
    if (topK > 0 && topK < out.length) {
      const v = cutoff(out, topK);
      for (let i = 0; i < out.length; i++) if (out[i]! < v) out[i] = 0;
    }
    if (topP < 1) {
      let total = 0;
      for (let i = 0; i < out.length; i++) total += out[i]!;
      const v = topPCut(out, topP * total);
      for (let i = 0; i < out.length; i++) if (out[i]! < v) out[i] = 0;
    }
    if (minP > 0) {
      let max = 0;
      for (let i = 0; i < out.length; i++) max = Math.max(max, out[i]!);
      const v = minP * max;
      for (let i = 0; i < out.length; i++) if (out[i]! < v) out[i] = 0;
    }
    return out;
  };
}

/**
 * The value a descending scan of `probs` stops at once its running sum reaches `target` (or at its
 * last non-zero value): the top-p cut-off. Scans the binades' prefix (`largestValues`) and, where
 * that prefix runs out before the scan stops (its per-binade sums are not the scan's), the whole
 * array sorted, so the result is always the whole scan's.
 */
function topPCut(probs: Float32Array, target: number): number {
  // A little past the target, so rounding in the per-binade sums does not stop the prefix short.
  const top = largestValues(probs, (_, mass) => mass >= target * (1 + 1e-9));
  const scan = (sorted: Float32Array): { v: number; stopped: boolean } => {
    let acc = 0;
    let v = sorted[0]!;
    for (let i = 0; i < sorted.length && sorted[i]! > 0; i++) {
      v = sorted[i]!;
      acc += v;
      if (acc >= target) return { v, stopped: true };
    }
    return { v, stopped: false };
  };
  if (top) {
    const r = scan(top);
    if (r.stopped) return r.v;
  }
  return scan(Float32Array.from(probs).sort().reverse()).v;
}

/** The token for logit row `r`: its argmax when greedy, else a draw from the filtered softmax. */
export function sampleLogitsRow(logits: Float32Array, vocab: number, r: number, p: SamplingParams | undefined, random: SeededRandom): number {
  if (isGreedy(p)) return argmaxRow(logits, vocab, r);
  const probs = softmaxRow(logits, vocab, r, p!.temperature!);
  const filter = probabilityFilter(p!);
  return sampleFrom(filter ? filter(probs) : probs, random);
}
