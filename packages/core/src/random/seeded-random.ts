import { uniformFloat64 } from 'pure-rand/distribution/uniformFloat64';
import { xoroshiro128plus, xoroshiro128plusFromState } from 'pure-rand/generator/xoroshiro128plus';
import { InvalidArgumentError } from '../errors.js';

/** A seed: any integer; only its low 64 bits count. */
export type Seed = number | bigint;

const MASK64 = (1n << 64n) - 1n;

/** SplitMix64's output for state `x`: the usual way to spread a 64-bit seed over a larger state. */
function splitMix64(x: bigint): bigint {
  let z = (x + 0x9e3779b97f4a7c15n) & MASK64;
  z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & MASK64;
  z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & MASK64;
  return z ^ (z >> 31n);
}

const hi32 = (v: bigint): number => Number(v >> 32n) | 0;
const lo32 = (v: bigint): number => Number(v & 0xffffffffn) | 0;

/** A random 64-bit seed, for a request that gave none. */
export function randomSeed(): bigint {
  return globalThis.crypto.getRandomValues(new BigUint64Array(1))[0]!;
}

/**
 * A reproducible random stream (xoroshiro128+): sampling with a seed, and test data. A seed in the
 * 32-bit range seeds the generator directly (so streams made before 64-bit seeds keep their
 * values); a wider one fills the 128-bit state through SplitMix64, so every bit of it counts.
 */
export class SeededRandom {
  readonly #rng: ReturnType<typeof xoroshiro128plus>;

  constructor(seed: Seed) {
    if (typeof seed === 'number' && !Number.isInteger(seed)) throw new InvalidArgumentError(`a seed must be an integer, got ${seed}`);
    // Its 64-bit two's-complement value: 2^64 + 7 is the seed 7, 2^64 − 1 the seed −1.
    const wide = BigInt.asIntN(64, BigInt(seed));
    if (wide >= -(2n ** 31n) && wide < 2n ** 31n) {
      this.#rng = xoroshiro128plus(Number(wide));
      return;
    }
    const x = wide & MASK64;
    const s0 = splitMix64(x);
    const s1 = splitMix64((x + 0x9e3779b97f4a7c15n) & MASK64);
    this.#rng = xoroshiro128plusFromState([hi32(s0), lo32(s0), hi32(s1), lo32(s1)]);
  }

  /** Uniform in [0, 1). */
  float(): number {
    return uniformFloat64(this.#rng);
  }

  /** The next `n` values `float()` will return, without drawing them (a copy of the stream draws them). */
  ahead(n: number): number[] {
    const copy = this.#rng.clone();
    return Array.from({ length: n }, () => uniformFloat64(copy));
  }

  /** Uniform integer in [lo, hi]. */
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.float() * (hi - lo + 1));
  }

  /** Standard normal (Box–Muller). */
  normal(): number {
    const u = 1 - this.float();
    const v = this.float();
    return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * v);
  }

  /** `n` normal values scaled by `scale`, never all zero. */
  normals(n: number, scale = 1): Float32Array {
    const out = new Float32Array(n);
    for (let i = 0; i < n; i++) out[i] = this.normal() * scale;
    return out;
  }
}
