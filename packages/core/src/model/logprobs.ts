import { InvalidArgumentError } from '../errors.js';

/** One candidate token of a generated position and its log-probability. */
export interface TokenLogprob {
  readonly token: number;
  readonly logprob: number;
}

/** Most logprobs one position may report (OpenAI's top_logprobs limit). */
export const MAX_LOGPROBS = 20;

/**
 * The `n` most likely tokens of logit row `r` with their log-probabilities (the log-softmax of the
 * logits as the sampler saw them, computed in f64), best first; ties by the lower token id.
 */
export function topLogprobs(logits: Float32Array, vocab: number, r: number, n: number): TokenLogprob[] {
  if (!Number.isInteger(n) || n < 0 || n > MAX_LOGPROBS) throw new InvalidArgumentError(`logprobs must be an integer in 0..${MAX_LOGPROBS}, got ${n}`);
  const base = r * vocab;
  let max = -Infinity;
  for (let i = 0; i < vocab; i++) max = Math.max(max, logits[base + i]!);
  let sum = 0;
  for (let i = 0; i < vocab; i++) sum += Math.exp(logits[base + i]! - max);
  const lse = max + Math.log(sum);
  // A partial selection: the best n kept sorted as the row is scanned once.
  const best: TokenLogprob[] = [];
  for (let i = 0; i < vocab && n > 0; i++) {
    const v = logits[base + i]!;
    if (best.length === n && v <= best[n - 1]!.logprob + lse) continue;
    const entry = { token: i, logprob: v - lse };
    let at = best.length;
    while (at > 0 && best[at - 1]!.logprob < entry.logprob) at--;
    best.splice(at, 0, entry);
    if (best.length > n) best.pop();
  }
  return best;
}
