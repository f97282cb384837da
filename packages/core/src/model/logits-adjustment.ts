import type { SamplingParams } from './sampling.js';

/**
 * What the penalties read of a sequence: the tokens of its prompt, and how often each token came
 * in its output so far.
 */
export class TokenHistory {
  readonly #prompt: ArrayLike<number>;
  #promptSet: Set<number> | undefined;
  readonly #counts: Map<number, number>;
  #generated: number;

  constructor(prompt: ArrayLike<number>, counts = new Map<number, number>(), generated = 0) {
    this.#prompt = prompt;
    this.#counts = counts;
    this.#generated = generated;
  }

  /** Tokens generated so far. */
  get generated(): number {
    return this.#generated;
  }

  /** The distinct tokens of the prompt (made on first use: only the repetition penalty reads them). */
  get promptTokens(): ReadonlySet<number> {
    this.#promptSet ??= new Set(Array.from(this.#prompt));
    return this.#promptSet;
  }

  /** Each output token and how many times it came. */
  get outputCounts(): ReadonlyMap<number, number> {
    return this.#counts;
  }

  push(token: number): void {
    this.#counts.set(token, (this.#counts.get(token) ?? 0) + 1);
    this.#generated++;
  }

  /** This history followed by `tokens` (draft tokens under verification), leaving this one as it is. */
  extended(tokens: readonly number[]): TokenHistory {
    if (tokens.length === 0) return this;
    const next = new TokenHistory(this.#prompt, new Map(this.#counts), this.#generated);
    next.#promptSet = this.#promptSet;
    for (const t of tokens) next.push(t);
    return next;
  }
}

/** Whether `p` changes the logits before sampling (so a row must be copied and adjusted). */
export function adjustsLogits(p: SamplingParams | undefined, stopTokens: readonly number[]): boolean {
  if (!p) return false;
  return (p.minTokens ?? 0) > 0 && stopTokens.length > 0
    || (p.logitBias?.size ?? 0) > 0
    || (p.repetitionPenalty ?? 1) !== 1
    || (p.presencePenalty ?? 0) !== 0
    || (p.frequencyPenalty ?? 0) !== 0;
}

/**
 * Adjusts one logit row (`vocab` values, in place) the way vLLM's sampler does before it samples,
 * in its order:
 * 1. while fewer than `minTokens` tokens are generated, the stop tokens become −∞;
 * 2. the logit bias is added;
 * 3. the repetition penalty, over the tokens of the prompt and of the output: a positive logit is
 *    divided by it, any other multiplied;
 * 4. the frequency penalty times each output token's count, then the presence penalty once per
 *    output token, are subtracted (OpenAI's definition).
 * This is the one definition of these adjustments; a device sampler must match it.
 */
export function adjustLogits(row: Float32Array, p: SamplingParams, history: TokenHistory, stopTokens: readonly number[]): void {
  if ((p.minTokens ?? 0) > history.generated) for (const t of stopTokens) row[t] = -Infinity;
  for (const [t, bias] of p.logitBias ?? []) row[t]! += bias;
  const repetition = p.repetitionPenalty ?? 1;
  if (repetition !== 1) {
    const scale = (t: number) => {
      const v = row[t]!;
      row[t] = v > 0 ? v / repetition : v * repetition;
    };
    for (const t of history.promptTokens) scale(t);
    for (const t of history.outputCounts.keys()) if (!history.promptTokens.has(t)) scale(t);
  }
  const frequency = p.frequencyPenalty ?? 0;
  const presence = p.presencePenalty ?? 0;
  if (frequency !== 0 || presence !== 0) {
    for (const [t, count] of history.outputCounts) {
      row[t]! -= frequency * count;
      row[t]! -= presence;
    }
  }
}
