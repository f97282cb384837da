import type { StepRunner } from '../driver/step-runner.js';
import { InvalidArgumentError } from '../errors.js';
import type { StepPath } from '../driver/step-driver.js';
import type { Sequence } from '../driver/sequence.js';
import { acceptGreedy, acceptGreedyIds, acceptRejection, type Acceptance } from '../driver/acceptance.js';
import { ARGMAX_ROW, pickable, samplable, sampledRow, type DeviceTokenPicker, type SampledRow } from '../engine/device-token-picker.js';
import type { DevicePtr } from '../device/device-ptr.js';
import type { Stream } from '../device/gpu-backend.js';
import { probabilityFilter, type SamplingParams } from '../model/sampling.js';
import type { SeededRandom } from '../random/seeded-random.js';
import { maskLogitsRow, type TokenConstraint } from '../engine/token-constraint.js';
import { positionLogprobs, type PositionLogprobs } from '../model/logprobs.js';

/** One sequence of a verify step: its last token (not yet fed) and how it samples. */
export interface VerifySequence {
  readonly seq: Sequence;
  readonly pending: number;
  readonly greedy: boolean;
  readonly sampling?: SamplingParams;
  readonly random: SeededRandom;
  /** Report each emitted token's logprob and its row's top N (0: its own only; absent: none). */
  readonly logprobs?: number;
  /** Only tokens this allows are emitted: each row is masked as the rule stands after the drafts before it. */
  readonly constraint?: TokenConstraint;
  /**
   * Row `r` as the sequence samples from it once `ahead` drafts are accepted (its logit bias,
   * penalties, min tokens: see RequestSampler.row); absent: the model's rows as they are.
   */
  readonly samplingRow?: (logits: Float32Array, vocab: number, r: number, ahead: readonly number[]) => Float32Array;
}

export interface VerifyOutcome {
  /** Rows per sequence in the step (1 + the longest draft). */
  readonly k: number;
  /** How the driver ran the step (a capture's time is not a replay's). */
  readonly path: StepPath;
  /** Per sequence: the tokens it emits (accepted drafts, then the target's next token). */
  readonly emitted: number[][];
  /** Per sequence: how many of its own (unpadded) drafts were accepted. */
  readonly accepted: number[];
  /** Per sequence asking for them: each emitted token's logprobs, of the model's row. */
  readonly logprobs: (PositionLogprobs[] | undefined)[];
}

/**
 * Verifies `drafts` (one list per sequence, possibly empty) in one step of the driver and folds
 * the accepted rows: greedy sequences keep drafts equal to the target's argmax, sampled ones go
 * through rejection sampling. Short proposals are padded to the longest; a padded draft is
 * accepted only when it is what the target would produce, so the output does not change.
 * Returns undefined, running nothing, when no sequence has a draft (the caller decodes).
 */
export function verifyDrafts(
  driver: StepRunner, vocab: number, seqs: readonly VerifySequence[], drafts: readonly (readonly number[])[], picker?: DeviceTokenPicker,
): VerifyOutcome | undefined {
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
  // Every sequence plain greedy: the rows' argmax ids from the device decide acceptance.
  if (picker && seqs.length * k <= picker.maxRows && seqs.every((s) => pickable({ ...s, adjusted: s.samplingRow !== undefined }))) {
    const ids = picker.argmax(result.output, seqs.length * k, vocab, driver.stream);
    return fold(driver, result.path, k, padded, drafts, seqs.map((_, i) => acceptGreedyIds(ids.subarray(i * k, (i + 1) * k), padded[i]!)), () => undefined);
  }
  // Greedy and sampled sequences whose rows are the model's, without logprobs: rejection sampling
  // on the device, only ids and draft probabilities come back.
  if (picker?.sample && seqs.length * k <= picker.maxRows && seqs.every((s) => s.logprobs === undefined && samplable({ ...s, adjusted: s.samplingRow !== undefined }))) {
    const sample = picker.sample.bind(picker);
    return fold(driver, result.path, k, padded, drafts, rejectOnDevice(sample, result.output, vocab, driver.stream, seqs, k, padded, drafts), () => undefined);
  }
  const logits = driver.readOutputF32(result);
  seqs.forEach((s, i) => {
    if (s.constraint) maskDraftRows(s.constraint, logits.subarray(i * k * vocab, (i + 1) * k * vocab), vocab, padded[i]!);
  });
  const acceptances: Acceptance[] = seqs.map((s, i) => {
    const rows = s.samplingRow ? samplingRows(s.samplingRow, logits, vocab, i, k, padded[i]!) : logits.subarray(i * k * vocab, (i + 1) * k * vocab);
    if (s.greedy) return acceptGreedy(rows, vocab, padded[i]!);
    const p = s.sampling!;
    const transform = probabilityFilter(p);
    // Its own drafts only: padding is what the other sequences' drafts made of this step, and a
    // seeded sequence's tokens must not depend on them.
    const own = drafts[i]!;
    return acceptRejection(rows.subarray(0, (own.length + 1) * vocab), vocab, own, { temperature: p.temperature!, random: s.random, ...(transform ? { transform } : {}) });
  });
  // Emitted token j came from row j of its sequence (row j predicts the token after row j).
  return fold(driver, result.path, k, padded, drafts, acceptances, (tokens, i) => {
    const n = seqs[i]!.logprobs;
    return n === undefined ? undefined : tokens.map((token, j) => positionLogprobs(logits, vocab, i * k + j, token, n));
  });
}

/**
 * `acceptRejection` (point-mass drafts) for every sampled sequence at once on the device, greedy
 * ones by their argmax ids (padded drafts), in one `sample` call of all k rows a sequence. A sampled
 * sequence verifies its own n drafts (as the host path does), so its rows past n are not used. Its
 * draws are the host's, in its order: draw j tests draft j and, when draft j − 1 was rejected, is
 * the residual draw of row j − 1 (or, after n accepted drafts, row n's draw); so row j takes draw
 * j + 1 for its residual and row n draw n. The sequence's stream then moves past the draws the
 * outcome used.
 */
function rejectOnDevice(
  sample: NonNullable<DeviceTokenPicker['sample']>, logits: DevicePtr, vocab: number, stream: Stream, seqs: readonly VerifySequence[], k: number, padded: readonly number[][],
  drafts: readonly (readonly number[])[],
): Acceptance[] {
  const draws = seqs.map((s, i) => (s.greedy ? [] : s.random.ahead(drafts[i]!.length + 1)));
  const rows = seqs.flatMap((s, i) => Array.from({ length: k }, (_, j): SampledRow => {
    const n = drafts[i]!.length;
    if (s.greedy || j > n) return ARGMAX_ROW;
    const row = sampledRow(s.sampling, () => draws[i]![Math.min(j + 1, n)]!);
    return j < n ? { ...row, draft: drafts[i]![j]! } : row;
  }));
  const { tokens, draftProbs } = sample(logits, rows, vocab, stream);
  if (!draftProbs && rows.some((row) => row.draft !== undefined)) {
    throw new InvalidArgumentError('the device token picker\'s sample returned no draftProbs for rows with drafts: a picker with sample must verify drafts (SampledRow.draft)');
  }
  return seqs.map((s, i) => {
    const at = i * k;
    if (s.greedy) return acceptGreedyIds(tokens.subarray(at, at + k), padded[i]!);
    const n = drafts[i]!.length;
    let j = 0;
    while (j < n && draws[i]![j]! < draftProbs![at + j]!) j++;
    // Rejected at j: draws 0..j tested, draw j + 1 drew the residual; all accepted: n + 1 draws.
    for (let used = j < n ? j + 2 : n + 1; used > 0; used--) s.random.float();
    return { accepted: j + 1, next: tokens[at + j]! };
  });
}

/** Folds the accepted rows into the sequences and says what each emits. */
function fold(
  driver: StepRunner, path: StepPath, k: number, padded: readonly number[][], drafts: readonly (readonly number[])[], acceptances: readonly Acceptance[],
  logprobsOf: (tokens: number[], i: number) => PositionLogprobs[] | undefined,
): VerifyOutcome {
  driver.accept(acceptances.map((a) => a.accepted));
  const emitted = acceptances.map((a, i) => [...padded[i]!.slice(0, a.accepted - 1), a.next]);
  return {
    k,
    path,
    emitted,
    accepted: acceptances.map((a, i) => Math.min(a.accepted - 1, drafts[i]!.length)),
    logprobs: emitted.map(logprobsOf),
  };
}

/**
 * Masks the k rows of one constrained sequence: row j with the tokens allowed after drafts 0..j−1.
 * Walks the constraint through the drafts and back, leaving it as it was. Past a draft the rule
 * forbids, the rows stay unmasked: acceptance stops at that draft (its row gives it −∞). Past a
 * draft that completes the rule they stay unmasked too: the output ends at that draft.
 */
function maskDraftRows(constraint: TokenConstraint, rows: Float32Array, vocab: number, drafts: readonly number[]): void {
  let walked = 0;
  try {
    for (let j = 0; j <= drafts.length; j++) {
      maskLogitsRow(rows, vocab, j, constraint.allowedTokens());
      if (j === drafts.length || !constraint.accept(drafts[j]!)) break;
      walked++;
      // Complete after this draft: the output ends with it, and the rule allows nothing further.
      if (constraint.isComplete()) break;
    }
  } finally {
    if (walked > 0) constraint.rollback(walked);
  }
}

/** The k rows of sequence `i` as it samples from them: row j as if drafts 0..j − 1 were accepted. */
function samplingRows(row: NonNullable<VerifySequence['samplingRow']>, logits: Float32Array, vocab: number, i: number, k: number, drafts: readonly number[]): Float32Array {
  const out = new Float32Array(k * vocab);
  for (let j = 0; j < k; j++) out.set(row(logits, vocab, i * k + j, drafts.slice(0, j)), j * vocab);
  return out;
}
