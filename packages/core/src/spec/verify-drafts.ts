import type { StepRunner } from '../driver/step-runner.js';
import type { StepPath } from '../driver/step-driver.js';
import type { Sequence } from '../driver/sequence.js';
import { acceptMatching, acceptPickedIds, type Acceptance } from '../driver/acceptance.js';
import { pickable, samplable, sampledRow, type DeviceTokenPicker, type SampledRow } from '../engine/device-token-picker.js';
import type { DevicePtr } from '../device/device-ptr.js';
import { sampleLogitsRow, type SamplingParams } from '../model/sampling.js';
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
 * the accepted rows: each sequence keeps its drafts while they equal the token its row gives, the
 * argmax for a greedy sequence, for a sampled one the token plain sampling draws with the
 * sequence's next draw (`acceptMatching`), so what a sequence emits, and the draws it takes, do not
 * depend on whether a step verified or decoded, nor on the other sequences' drafts. Short proposals
 * are padded to the longest; a padded draft is kept only when it is the token its row gives, so the
 * output does not change. Returns undefined, running nothing, when no sequence has a draft (the
 * caller decodes).
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
    return fold(driver, result.path, k, padded, drafts, seqs.map((_, i) => acceptPickedIds(ids.subarray(i * k, (i + 1) * k), padded[i]!)), () => undefined);
  }
  // Greedy and sampled sequences whose rows are the model's: every row's token (and logprobs) picked
  // on the device, only ids come back.
  if (picker?.sample && seqs.length * k <= picker.maxRows && seqs.every((s) => samplable({ ...s, adjusted: s.samplingRow !== undefined }))) {
    return pickOnDevice(picker.sample.bind(picker), driver, result.output, result.path, vocab, seqs, k, padded, drafts);
  }
  const logits = driver.readOutputF32(result);
  seqs.forEach((s, i) => {
    if (s.constraint) maskDraftRows(s.constraint, logits.subarray(i * k * vocab, (i + 1) * k * vocab), vocab, padded[i]!);
  });
  const acceptances: Acceptance[] = seqs.map((s, i) => {
    const rows = s.samplingRow ? samplingRows(s.samplingRow, logits, vocab, i, k, padded[i]!) : logits.subarray(i * k * vocab, (i + 1) * k * vocab);
    const params = s.greedy ? undefined : s.sampling;
    return acceptMatching((j) => sampleLogitsRow(rows, vocab, j, params, s.random), k, padded[i]!);
  });
  // Emitted token j came from row j of its sequence (row j predicts the token after row j).
  return fold(driver, result.path, k, padded, drafts, acceptances, (tokens, i) => {
    const n = seqs[i]!.logprobs;
    return n === undefined ? undefined : tokens.map((token, j) => positionLogprobs(logits, vocab, i * k + j, token, n));
  });
}

/**
 * `acceptMatching` for every sequence at once on the device, in one `sample` call of all k rows a
 * sequence: a sampled sequence's row j drawn with the j-th of its next k draws (looked at, not
 * taken), then its stream moved past the draws of the tokens it emits, one a token, as decode steps
 * would take them. Rows past a sequence's first mismatch are picked and not used.
 */
function pickOnDevice(
  sample: NonNullable<DeviceTokenPicker['sample']>, driver: StepRunner, logits: DevicePtr, path: StepPath, vocab: number, seqs: readonly VerifySequence[], k: number,
  padded: readonly number[][], drafts: readonly (readonly number[])[],
): VerifyOutcome {
  const draws = seqs.map((s) => (s.greedy ? [] : s.random.ahead(k)));
  const rows = seqs.flatMap((s, i) => Array.from({ length: k }, (_, j): SampledRow => sampledRow(s.greedy ? undefined : s.sampling, () => draws[i]![j]!, s.logprobs)));
  const picked = sample(logits, rows, vocab, driver.stream);
  const acceptances = seqs.map((s, i) => {
    const a = acceptPickedIds(picked.tokens.subarray(i * k, (i + 1) * k), padded[i]!);
    if (!s.greedy) for (let used = 0; used < a.accepted; used++) s.random.float();
    return a;
  });
  return fold(driver, path, k, padded, drafts, acceptances, (tokens, i) =>
    seqs[i]!.logprobs === undefined ? undefined : tokens.map((_, j) => picked.logprobs[i * k + j]!),
  );
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
