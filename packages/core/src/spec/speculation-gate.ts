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
}

/**
 * Whether a step should verify drafts or decode plainly: speculation only where it is faster.
 * It keeps the measured time of decode and of verify steps per batch size, and the engine keeps each sequence's accepted drafts per verify; a step verifies when the
 * tokens it expects per millisecond (one per sequence plus the drafts expected to be accepted,
 * over the verify's time) beat a plain decode's (one per sequence over the decode's time). A step
 * whose cost is not yet measured runs to measure it, and while the gate decodes it still verifies
 * once every `probeEvery` steps, so a sequence whose text turns repetitive is noticed.
 */
export class SpeculationGate {
  readonly #smoothing: number;
  readonly #probeEvery: number;
  readonly #decodeMs = new Map<number, Smoothed>();
  readonly #verifyMs = new Map<number, Smoothed>();
  #decodedSince = 0;

  constructor(options: SpeculationGateOptions = {}) {
    this.#smoothing = options.smoothing ?? 0.25;
    this.#probeEvery = options.probeEvery ?? 16;
    if (!(this.#smoothing > 0 && this.#smoothing <= 1)) throw new InvalidArgumentError(`speculation gate: smoothing must be in (0, 1], got ${this.#smoothing}`);
    if (!Number.isInteger(this.#probeEvery) || this.#probeEvery < 1) throw new InvalidArgumentError(`speculation gate: probeEvery must be a positive integer, got ${this.#probeEvery}`);
  }

  /** Verify (true) or decode (false) a batch of `batch` sequences expected to accept `expectedAccepted` drafts in all. */
  shouldVerify(batch: number, expectedAccepted: number): boolean {
    const verify = this.#verifyMs.get(batch)?.value;
    if (verify === undefined) return true;
    const decode = this.#decodeMs.get(batch)?.value;
    if (decode === undefined) return false;
    if (this.#decodedSince >= this.#probeEvery) return true;
    return (batch + expectedAccepted) / verify > batch / decode;
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
