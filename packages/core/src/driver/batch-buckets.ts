import { InvalidArgumentError } from '../errors.js';

/**
 * Default padded batch sizes: 1, 2, 4, then every multiple of 8 up to 256 and of 16 beyond, below
 * `maxBatch`, and `maxBatch` itself. A step runs at the next size up, and a padded row costs some
 * kernels as much as a real one (docs/benchmarks.md, @metrale/serve, "Batch buckets"), so the
 * sizes stay close: at most 7 padded rows up to 256 and 15 beyond, where powers of two padded up
 * to half a bucket. Each size is one more graph to capture at startup.
 */
export function defaultBuckets(maxBatch: number): number[] {
  const out: number[] = [];
  for (let b = 1; b < Math.min(8, maxBatch); b *= 2) out.push(b);
  for (let b = 8; b < maxBatch; b += b < 256 ? 8 : 16) out.push(b);
  out.push(maxBatch);
  return out;
}

/**
 * The padded batch sizes graphs are captured for. A step of n sequences runs at the smallest
 * bucket ≥ n; the extra batch positions are padding (slot −1), which every kernel must skip.
 */
export class BatchBuckets {
  readonly sizes: readonly number[];
  readonly #forSize: Int32Array;

  constructor(maxBatch: number, sizes: readonly number[] = defaultBuckets(maxBatch)) {
    const sorted = [...new Set(sizes)].sort((a, b) => a - b);
    if (sorted.length === 0 || sorted.some((s) => !Number.isInteger(s) || s < 1)) {
      throw new InvalidArgumentError(`buckets must be positive integers, got [${sizes.join(', ')}]`);
    }
    if (sorted[sorted.length - 1] !== maxBatch) {
      throw new InvalidArgumentError(`the largest bucket must equal maxBatch (${maxBatch}), got [${sorted.join(', ')}]`);
    }
    this.sizes = sorted;
    this.#forSize = new Int32Array(maxBatch + 1);
    let i = 0;
    for (let n = 1; n <= maxBatch; n++) {
      while (sorted[i]! < n) i++;
      this.#forSize[n] = sorted[i]!;
    }
  }

  /** The bucket a batch of `n` sequences runs in. */
  bucketFor(n: number): number {
    if (!Number.isInteger(n) || n < 1 || n >= this.#forSize.length) {
      throw new InvalidArgumentError(`batch of ${n} sequences: must be between 1 and maxBatch (${this.#forSize.length - 1})`);
    }
    return this.#forSize[n]!;
  }
}
