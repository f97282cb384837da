import { InvalidArgumentError } from '../errors.js';

/** Exponential smoothing of a measured figure. */
class Smoothed {
  value: number | undefined;
  constructor(private readonly weight: number) {}
  add(x: number): void {
    this.value = this.value === undefined ? x : this.value + this.weight * (x - this.value);
  }
}

export interface SpeculationGateOptions {
  /** Weight of a new measurement in the running averages (default 0.25). */
  readonly smoothing?: number;
  /** While decoding, verify once every this many steps anyway, so acceptance and cost stay measured (default 16). */
  readonly probeEvery?: number;
  /**
   * The longest interval between probes (default 256): each probe that finds speculation still
   * slower doubles the interval up to this, and one that finds it faster (or any verify the
   * figures ask for) sets it back to `probeEvery`, so text where drafts never land costs few probes.
   */
  readonly maxProbeEvery?: number;
}

/**
 * Whether a step should verify drafts or decode plainly: speculation only where it is faster.
 * It keeps the measured time of decode and of verify steps per batch size, and the engine keeps each sequence's accepted drafts per verify; a step verifies when the
 * tokens it expects per millisecond (one per sequence plus the drafts expected to be accepted,
 * over the verify's time) beat a plain decode's (one per sequence over the decode's time). A step
 * whose cost is not yet measured runs to measure it, and while the gate decodes it still verifies
 * now and then (a probe, after `probeEvery` decodes, twice as many after each probe that did not
 * pay, up to `maxProbeEvery`), so a sequence whose text turns repetitive is noticed.
 */
export class SpeculationGate {
  readonly #smoothing: number;
  readonly #probeEvery: number;
  readonly #maxProbeEvery: number;
  /** Decodes before the next probe. */
  #probeInterval: number;
  /** A probe ran: the next decision, over its measurements, sets the interval. */
  #probed = false;
  readonly #decodeMs = new Map<number, Smoothed>();
  readonly #verifyMs = new Map<number, Smoothed>();
  #decodedSince = 0;

  constructor(options: SpeculationGateOptions = {}) {
    this.#smoothing = options.smoothing ?? 0.25;
    this.#probeEvery = options.probeEvery ?? 16;
    this.#maxProbeEvery = options.maxProbeEvery ?? 256;
    this.#probeInterval = this.#probeEvery;
    if (!(this.#smoothing > 0 && this.#smoothing <= 1)) throw new InvalidArgumentError(`speculation gate: smoothing must be in (0, 1], got ${this.#smoothing}`);
    if (!Number.isInteger(this.#probeEvery) || this.#probeEvery < 1) throw new InvalidArgumentError(`speculation gate: probeEvery must be a positive integer, got ${this.#probeEvery}`);
    if (!Number.isInteger(this.#maxProbeEvery) || this.#maxProbeEvery < this.#probeEvery) {
      throw new InvalidArgumentError(`speculation gate: maxProbeEvery must be an integer ≥ probeEvery (${this.#probeEvery}), got ${this.#maxProbeEvery}`);
    }
  }

  /** Verify (true) or decode (false) a batch of `batch` sequences expected to accept `expectedAccepted` drafts in all. */
  shouldVerify(batch: number, expectedAccepted: number): boolean {
    const verify = this.#verifyMs.get(batch)?.value;
    if (verify === undefined) return true;
    const decode = this.#decodeMs.get(batch)?.value;
    if (decode === undefined) return false;
    const pays = (batch + expectedAccepted) / verify > batch / decode;
    if (this.#probed && !pays) this.#probeInterval = Math.min(this.#maxProbeEvery, 2 * this.#probeInterval);
    this.#probed = false;
    if (pays) {
      this.#probeInterval = this.#probeEvery;
      return true;
    }
    if (this.#decodedSince < this.#probeInterval) return false;
    this.#probed = true;
    return true;
  }

  /** A sequence's accepted drafts per verify, smoothed as the gate smooths its times (`previous` undefined before its first verify). */
  smoothAccepted(previous: number | undefined, accepted: number): number {
    return previous === undefined ? accepted : previous + this.#smoothing * (accepted - previous);
  }

  recordDecode(batch: number, ms: number): void {
    this.#at(this.#decodeMs, batch).add(ms);
    this.#decodedSince++;
  }

  recordVerify(batch: number, ms: number): void {
    this.#at(this.#verifyMs, batch).add(ms);
    this.#decodedSince = 0;
  }

  #at<K>(map: Map<K, Smoothed>, key: K): Smoothed {
    let s = map.get(key);
    if (!s) map.set(key, (s = new Smoothed(this.#smoothing)));
    return s;
  }
}
