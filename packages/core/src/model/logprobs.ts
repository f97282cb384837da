import { InvalidArgumentError } from '../errors.js';

/** One candidate token of a generated position and its log-probability. */
export interface TokenLogprob {
  readonly token: number;
  readonly logprob: number;
}

/**
 * A token that was generated (or given in the prompt) at a position: its log-probability, its rank
 * in its row (1: the most likely; tokens as likely as it share its rank, as vLLM counts), and the
 * row's `n` most likely tokens.
 */
export interface PositionLogprobs extends TokenLogprob {
  readonly rank: number;
  readonly top: TokenLogprob[];
}

/** Most logprobs one position may report (OpenAI's top_logprobs limit). */
export const MAX_LOGPROBS = 20;

function checkCount(n: number): void {
  if (!Number.isInteger(n) || n < 0 || n > MAX_LOGPROBS) throw new InvalidArgumentError(`logprobs must be an integer in 0..${MAX_LOGPROBS}, got ${n}`);
}

/** log Σ exp over logit row `r`, in f64 (the logprobs' normalizer: a token's logprob is its logit less it). */
export function logSumExp(logits: Float32Array, vocab: number, r: number): number {
  const base = r * vocab;
  let max = -Infinity;
  for (let i = 0; i < vocab; i++) max = Math.max(max, logits[base + i]!);
  let sum = 0;
  for (let i = 0; i < vocab; i++) sum += Math.exp(logits[base + i]! - max);
  return max + Math.log(sum);
}

function topOf(logits: Float32Array, vocab: number, r: number, n: number, lse: number): TokenLogprob[] {
  const base = r * vocab;
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

/**
 * The `n` most likely tokens of logit row `r` with their log-probabilities (the log-softmax of the
 * logits as the model gave them, computed in f64), best first; ties by the lower token id.
 */
export function topLogprobs(logits: Float32Array, vocab: number, r: number, n: number): TokenLogprob[] {
  checkCount(n);
  return topOf(logits, vocab, r, n, logSumExp(logits, vocab, r));
}

/** `token`'s log-probability and rank in logit row `r`, with the row's `n` most likely tokens (see `topLogprobs`). */
export function positionLogprobs(logits: Float32Array, vocab: number, r: number, token: number, n: number): PositionLogprobs {
  checkCount(n);
  if (!Number.isInteger(token) || token < 0 || token >= vocab) throw new InvalidArgumentError(`logprobs: token ${token} is outside the vocabulary (${vocab})`);
  const lse = logSumExp(logits, vocab, r);
  const base = r * vocab;
  const v = logits[base + token]!;
  let rank = 0;
  for (let i = 0; i < vocab; i++) if (logits[base + i]! >= v) rank++;
  return { token, logprob: v - lse, rank, top: topOf(logits, vocab, r, n, lse) };
}
