import type { StepPath } from '../driver/step-driver.js';
import type { StepRunner } from '../driver/step-runner.js';
import type { PositionLogprobs } from '../model/logprobs.js';
import { DraftCheck } from '../spec/draft-check.js';
import type { DraftProposer } from '../spec/ngram-proposer.js';
import { SpeculationGate } from '../spec/speculation-gate.js';
import { verifyDrafts } from '../spec/verify-drafts.js';
import type { DeviceTokenPicker } from './device-token-picker.js';
import type { RunningSequence } from './running-sequence.js';

/** What a verify step ran: its sequences, rows per sequence, drafts proposed and accepted, and how the driver ran it. */
export interface VerifyCounts {
  readonly seqs: number;
  readonly k: number;
  readonly drafted: number;
  readonly accepted: number;
  readonly path: StepPath;
}

/** Where verify steps run: the driver, its logits rows' width, and the device picker for greedy rows (if any). */
export interface VerifyTarget {
  readonly driver: StepRunner;
  readonly vocab: number;
  readonly picker: DeviceTokenPicker | undefined;
}

/** Appends generated tokens (and their logprobs) to a running sequence and reports them: the engine loop's. */
export type EmitTokens = (r: RunningSequence, tokens: number[], logprobs: PositionLogprobs[] | undefined) => void;

/**
 * The engine loop's speculation: up to `k` drafts a sequence from `proposer`, verified in one
 * step, and (adaptive, the default) the `SpeculationGate` choosing between a verify and a plain
 * decode from the measured step times and each sequence's accepted drafts. While the gate decodes,
 * each sequence checks the drafts it would have verified against the tokens that follow
 * (`checkDecoded`), so acceptance stays measured without verifies.
 */
export class LoopSpeculation {
  readonly k: number;
  readonly #proposer: DraftProposer;
  readonly #gate: SpeculationGate | undefined;
  readonly #target: VerifyTarget;

  /** `target`: where `verify` runs its steps (the engine loop's driver, logits width and picker). */
  constructor(options: { readonly proposer: DraftProposer; readonly k: number; readonly adaptive?: boolean }, target: VerifyTarget) {
    this.k = options.k;
    this.#proposer = options.proposer;
    this.#gate = options.adaptive !== false ? new SpeculationGate() : undefined;
    this.#target = target;
  }

  /** Whether a gate chooses (adaptive speculation); without one every step with drafts verifies. */
  get adaptive(): boolean {
    return this.#gate !== undefined;
  }

  /** Whether a step of `live` at `bucket` verifies: always without a gate, else where the gate expects it to be faster than a plain decode. */
  verifies(bucket: number, live: readonly RunningSequence[]): boolean {
    const gate = this.#gate;
    return !gate || gate.shouldVerify(bucket, live.length, this.#expectedAccepted(gate, live));
  }

  /** Whether the gate would decode a step of `live` at `bucket` (asked before the last decode's ids are read). */
  decodes(bucket: number, live: readonly RunningSequence[]): boolean {
    const gate = this.#gate;
    return gate !== undefined && !gate.shouldVerify(bucket, live.length, this.#expectedAccepted(gate, live));
  }

  /** A plain decode at `bucket` took `ms` (undefined: not a time that tells the next, e.g. a capture). */
  recordDecode(bucket: number, ms: number | undefined): void {
    this.#gate?.recordDecode(bucket, ms);
  }

  /** A verify at `bucket` took `ms` (undefined: untimed). */
  recordVerify(bucket: number, ms: number | undefined): void {
    this.#gate?.recordVerify(bucket, ms);
  }

  /** The generated counts of `live` before a plain decode, for `checkDecoded` after it (undefined without a gate: nothing to check). */
  countsBefore(live: readonly RunningSequence[]): number[] | undefined {
    return this.#gate ? live.map((r) => r.generated) : undefined;
  }

  /**
   * After a plain decode: each sequence that generated since `before` checks the drafts it proposed
   * after its last decode against the token just decoded (a verify would have kept them up to the
   * first that differs: greedy or sampled, it keeps drafts equal to what the sequence emits) and,
   * when they are settled, tells the gate and proposes anew.
   */
  checkDecoded(live: readonly RunningSequence[], before: readonly number[] | undefined): void {
    const gate = this.#gate;
    if (!gate || !before) return;
    live.forEach((r, i) => {
      if (r.generated === before[i] || r.sampler.adjusts || r.req.constraint) return;
      const accepted = r.shadow?.next(r.history[r.history.length - 1]!);
      if (accepted !== undefined) {
        gate.recordShadowAccepted(r.acceptedDrafts, accepted);
        r.shadow = undefined;
      }
      if (r.shadow || r.finish) return;
      const left = Math.min(this.k, r.req.maxTokens - r.generated - 1);
      if (left < 1) return;
      const drafts = this.#proposer.propose(r.history, left);
      if (drafts.length === 0) gate.recordShadowAccepted(r.acceptedDrafts, 0);
      else r.shadow = new DraftCheck(drafts);
    });
  }

  /**
   * One verify step over `live` on the target's driver, each sequence's accepted tokens passed to
   * `emit`; undefined when no sequence has a draft (the caller decodes).
   */
  verify(live: readonly RunningSequence[], emit: EmitTokens): VerifyCounts | undefined {
    const { driver, vocab, picker } = this.#target;
    // A sequence's drafts never run past its token budget, so every verify row lies inside the room
    // the loop's `add` checked (prompt + maxTokens ≤ maxSeqLen − maxK + 1).
    const drafts = live.map((r) => this.#proposer.propose(r.history, Math.min(this.k, r.req.maxTokens - r.generated - 1)));
    const outcome = verifyDrafts(
      driver, vocab,
      live.map((r) => ({
        seq: r.seq, pending: r.pending, greedy: r.sampler.greedy, random: r.sampler.random,
        ...(r.req.logprobs !== undefined ? { logprobs: r.req.logprobs } : {}),
        ...(r.req.sampling ? { sampling: r.req.sampling } : {}), ...(r.req.constraint ? { constraint: r.req.constraint } : {}),
        ...(r.sampler.adjusts ? { samplingRow: (l: Float32Array, v: number, row: number, ahead: readonly number[]) => r.sampler.row(l, v, row, ahead) } : {}),
      })),
      drafts,
      picker,
    );
    if (!outcome) return undefined;
    let drafted = 0;
    let accepted = 0;
    live.forEach((r, i) => {
      drafted += drafts[i]!.length;
      accepted += outcome.accepted[i]!;
      emit(r, outcome.emitted[i]!, outcome.logprobs[i]);
    });
    this.#gate?.recordAccepted(live.map((r) => r.acceptedDrafts), outcome.accepted);
    // The verify measured them; drafts proposed before it no longer follow the text.
    for (const r of live) r.shadow = undefined;
    return { seqs: live.length, k: outcome.k, drafted, accepted, path: outcome.path };
  }

  /** The drafts the gate expects `live` to accept in one verify, in all. */
  #expectedAccepted(gate: SpeculationGate, live: readonly RunningSequence[]): number {
    return live.reduce((a, r) => a + gate.expectedAccepted(r.acceptedDrafts, this.k), 0);
  }
}
