import type { StepRunner } from '../driver/step-runner.js';
import type { Sequence } from '../driver/sequence.js';
import { acceptGreedy, acceptRejection, type Acceptance } from '../driver/acceptance.js';
import { probabilityFilter, type SamplingParams } from '../model/sampling.js';
import type { SeededRandom } from '../random/seeded-random.js';
import { topLogprobs, type TokenLogprob } from '../model/logprobs.js';

/** One sequence of a verify step: its last token (not yet fed) and how it samples. */
export interface VerifySequence {
  readonly seq: Sequence;
  readonly pending: number;
  readonly greedy: boolean;
  readonly sampling?: SamplingParams;
  readonly random: SeededRandom;
  /** Report this many logprobs per emitted token (0 or absent: none). */
  readonly logprobs?: number;
}

export interface VerifyOutcome {
  /** Rows per sequence in the step (1 + the longest draft). */
  readonly k: number;
  /** Per sequence: the tokens it emits (accepted drafts, then the target's next token). */
  readonly emitted: number[][];
  /** Per sequence: how many of its own (unpadded) drafts were accepted. */
  readonly accepted: number[];
  /** Per sequence asking for them: the top logprobs of each emitted token's row. */
  readonly logprobs: (TokenLogprob[][] | undefined)[];
}

/**
 * Verifies `drafts` (one list per sequence, possibly empty) in one step of the driver and folds
 * the accepted rows: greedy sequences keep drafts equal to the target's argmax, sampled ones go
 * through rejection sampling. Short proposals are padded to the longest; a padded draft is
 * accepted only when it is what the target would produce, so the output does not change.
 * Returns undefined, running nothing, when no sequence has a draft (the caller decodes).
 */
export function verifyDrafts(driver: StepRunner, vocab: number, seqs: readonly VerifySequence[], drafts: readonly (readonly number[])[]): VerifyOutcome | undefined {
  const longest = Math.max(0, ...drafts.map((d) => d.length));
  if (longest === 0) return undefined;
  const k = 1 + longest;
  const padded = drafts.map((d, i) => {
    const out = d.slice();
    while (out.length < k - 1) out.push(out.length ? out[out.length - 1]! : seqs[i]!.pending);
    return out;
  });
  const tokens = Int32Array.from(seqs.flatMap((s, i) => [s.pending, ...padded[i]!]));
  const result = driver.verify({ seqs: seqs.map((s) => s.seq), k, tokens });
  const logits = driver.readOutputF32(result);
  const acceptances: Acceptance[] = seqs.map((s, i) => {
    const rows = logits.subarray(i * k * vocab, (i + 1) * k * vocab);
    if (s.greedy) return acceptGreedy(rows, vocab, padded[i]!);
    const p = s.sampling!;
    const transform = probabilityFilter(p);
    return acceptRejection(rows, vocab, padded[i]!, { temperature: p.temperature!, random: s.random, ...(transform ? { transform } : {}) });
  });
  driver.accept(acceptances.map((a) => a.accepted));
  return {
    k,
    emitted: acceptances.map((a, i) => [...padded[i]!.slice(0, a.accepted - 1), a.next]),
    accepted: acceptances.map((a, i) => Math.min(a.accepted - 1, drafts[i]!.length)),
    // Emitted token j came from row j of its sequence (row j predicts the token after row j).
    logprobs: acceptances.map((a, i) => {
      const n = seqs[i]!.logprobs ?? 0;
      return n > 0 ? Array.from({ length: a.accepted }, (_, j) => topLogprobs(logits, vocab, i * k + j, n)) : undefined;
    }),
  };
}
