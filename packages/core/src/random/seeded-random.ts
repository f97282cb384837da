import { uniformFloat64 } from 'pure-rand/distribution/uniformFloat64';
import { xoroshiro128plus } from 'pure-rand/generator/xoroshiro128plus';

/** A reproducible random stream (xoroshiro128+): sampling with a seed, and test data. */
export class SeededRandom {
  readonly #rng: ReturnType<typeof xoroshiro128plus>;

  constructor(seed: number) {
    this.#rng = xoroshiro128plus(seed | 0);
  }

  /** Uniform in [0, 1). */
  float(): number {
    return uniformFloat64(this.#rng);
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
