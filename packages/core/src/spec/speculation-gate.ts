import { InvalidArgumentError } from '../errors.js';

/** `previous` moved toward `x` by `weight` (`x` itself where there is no previous value). */
function smooth(previous: number | undefined, x: number, weight: number): number {
  return previous === undefined ? x : previous + weight * (x - previous);
}

/** Exponential smoothing of a measured figure. */
class Smoothed {
  value: number | undefined;
  constructor(private readonly weight: number) {}
  add(x: number): void {
    this.value = smooth(this.value, x, this.weight);
  }
}

/**
 * One sequence's drafts accepted per verify, smoothed as the gate smooths its times (undefined
 * before its first verify). The engine keeps one per sequence, starting empty (`{}`); the gate's
 * `recordAccepted` updates it and `expectedAccepted` reads it.
 */
export interface AcceptedDrafts {
  perVerify?: number;
}

export interface SpeculationGateOptions {
  /** Weight of a new measurement in the running averages (default 0.25). */
  readonly smoothing?: number;
  /**
   * After this many steps of one kind in a row, run the other once (default 16): a verify while
   * decoding, a decode while verifying, so both times and the acceptance stay measured.
   */
  readonly probeEvery?: number;
}

/**
 * Whether a step should verify drafts or decode plainly: speculation only where it is faster.
 * It keeps the measured time of decode and of verify steps per bucket (the padded batch a step runs
 * at, whose graphs it replays), and each sequence's accepted drafts per verify (`AcceptedDrafts`); a
 * step of n sequences verifies when the tokens it expects per millisecond (n plus the drafts
 * expected to be accepted, over the verify's time) beat a plain decode's (n over the decode's
 * time), that is when 1 + accepted / n exceeds the bucket's verify-to-decode time ratio (a sequence
 * not yet verified is expected to accept what the others have of late). A bucket
 * not yet measured both ways takes the ratio of the nearest bucket that is, so a batch that grows
 * or shrinks does not have to verify to find out; before any is, the first verify's bucket measures
 * (its capture is not timed, its next verify is).
 * After `probeEvery` steps of one kind the other runs once, so a sequence whose text turns
 * repetitive is noticed and a decode time never goes stale; drafts checked against plainly decoded
 * tokens (`recordShadowAccepted`) measure acceptance without a verify, and stand for such a probe.
 */
export class SpeculationGate {
  readonly #smoothing: number;
  readonly #probeEvery: number;
  readonly #decodeMs = new Map<number, Smoothed>();
  readonly #verifyMs = new Map<number, Smoothed>();
  /** Buckets that have verified, timed or not (their graphs are captured). */
  readonly #verifiedAt = new Set<number>();
  readonly #acceptedBySequences: Smoothed;
  #decodedSince = 0;
  #verifiedSince = 0;

  constructor(options: SpeculationGateOptions = {}) {
    this.#smoothing = options.smoothing ?? 0.25;
    this.#probeEvery = options.probeEvery ?? 16;
    this.#acceptedBySequences = new Smoothed(this.#smoothing);
    if (!(this.#smoothing > 0 && this.#smoothing <= 1)) throw new InvalidArgumentError(`speculation gate: smoothing must be in (0, 1], got ${this.#smoothing}`);
    if (!Number.isInteger(this.#probeEvery) || this.#probeEvery < 1) throw new InvalidArgumentError(`speculation gate: probeEvery must be a positive integer, got ${this.#probeEvery}`);
  }

  /**
   * Verify (true) or decode (false) a step of `sequences` sequences that runs at `bucket`, expected
   * to accept `expectedAccepted` drafts in all.
   */
  shouldVerify(bucket: number, sequences: number, expectedAccepted: number): boolean {
    const ratio = this.#ratio(bucket);
    if (ratio === undefined) {
      // Nothing to compare with yet: measure a verify first, then a decode. A bucket's first verify
      // captures its graph and is not timed; its next is. A batch still growing through new buckets
      // decodes meanwhile (each new bucket's verify would be another capture), and probes as below.
      if (this.#verifiedAt.size === 0 || this.#decodedSince >= this.#probeEvery) return true;
      return this.#verifiedAt.has(bucket) && this.#verifyMs.get(bucket)?.value === undefined;
    }
    if (this.#decodedSince >= this.#probeEvery) return true;
    if (this.#verifiedSince >= this.#probeEvery) return false;
    return 1 + expectedAccepted / Math.max(1, sequences) > ratio;
  }

  /**
   * A verify's accepted drafts, `accepted[i]` those of the sequence whose record is `sequences[i]`:
   * each record takes its count in, and their mean over the batch becomes the expectation of
   * sequences not yet verified.
   */
  recordAccepted(sequences: readonly AcceptedDrafts[], accepted: readonly number[]): void {
    let total = 0;
    sequences.forEach((sequence, i) => {
      sequence.perVerify = smooth(sequence.perVerify, accepted[i]!, this.#smoothing);
      total += accepted[i]!;
    });
    this.#acceptedBySequences.add(total / sequences.length);
  }

  /**
   * A sequence's drafts checked against the tokens it then decoded plainly (greedy: accepted up to
   * the first that differs), without a verify: taken in as a verify's count. It measures acceptance
   * as a probe would, so the count of decodes in a row toward the next probe starts over.
   */
  recordShadowAccepted(sequence: AcceptedDrafts, accepted: number): void {
    this.recordAccepted([sequence], [accepted]);
    this.#decodedSince = 0;
  }

  /**
   * The drafts a sequence is expected to accept per verify: its own smoothed count, or before its
   * first verify what verifies have accepted per sequence of late, or before any verify all `k`. A
   * batch that grows as prompts finish prefilling then does not verify for each newcomer's sake
   * where drafts have not been accepted.
   */
  expectedAccepted(sequence: AcceptedDrafts, k: number): number {
    return sequence.perVerify ?? this.#acceptedBySequences.value ?? k;
  }

  /** A decode step at `bucket` and its time: `undefined` for a graph capture, whose time says nothing of the next step. */
  recordDecode(bucket: number, ms: number | undefined): void {
    if (ms !== undefined) this.#at(this.#decodeMs, bucket).add(ms);
    this.#decodedSince++;
    this.#verifiedSince = 0;
  }

  /** A verify step at `bucket`, as `recordDecode`. */
  recordVerify(bucket: number, ms: number | undefined): void {
    if (ms !== undefined) this.#at(this.#verifyMs, bucket).add(ms);
    this.#verifiedAt.add(bucket);
    this.#verifiedSince++;
    this.#decodedSince = 0;
  }

  /** Verify over decode time at `bucket`, or where it lacks either, at the nearest bucket that has both (by size ratio; the larger on a tie). */
  #ratio(bucket: number): number | undefined {
    let best: number | undefined;
    let bestDistance = Infinity;
    let bestBucket = 0;
    for (const [b, verify] of this.#verifyMs) {
      const decode = this.#decodeMs.get(b)?.value;
      if (verify.value === undefined || decode === undefined) continue;
      const distance = Math.abs(Math.log2(b / bucket));
      if (distance < bestDistance || (distance === bestDistance && b > bestBucket)) {
        best = verify.value / decode;
        bestDistance = distance;
        bestBucket = b;
      }
    }
    return best;
  }

  #at<K>(map: Map<K, Smoothed>, key: K): Smoothed {
    let s = map.get(key);
    if (!s) map.set(key, (s = new Smoothed(this.#smoothing)));
    return s;
  }
}
