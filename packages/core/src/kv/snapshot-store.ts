import { InvalidArgumentError } from '../errors.js';

/**
 * Which saved recurrent state sits in which of `count` snapshot entries: each entry holds the
 * state of some sequence at a block boundary, named by the hash of the block that ends there.
 * When every entry is taken, saving reuses the least recently used one.
 */
export class SnapshotStore {
  readonly count: number;
  /** Hash → entry, in use order (the first is reused first). */
  readonly #byHash = new Map<string, number>();
  readonly #free: number[];

  constructor(count: number) {
    if (!Number.isSafeInteger(count) || count < 1) throw new InvalidArgumentError(`kv cache: a snapshot store needs at least one entry, got ${count}`);
    this.count = count;
    this.#free = Array.from({ length: count }, (_, i) => count - 1 - i);
  }

  get size(): number {
    return this.#byHash.size;
  }

  /** The entry holding the state at the end of block `hash` (marked as just used), if one does. */
  lookup(hash: string): number | undefined {
    const entry = this.#byHash.get(hash);
    if (entry !== undefined) {
      this.#byHash.delete(hash);
      this.#byHash.set(hash, entry);
    }
    return entry;
  }

  has(hash: string): boolean {
    return this.#byHash.has(hash);
  }

  /** The entry to save the state at the end of block `hash` into: a free one, else the least recently used one. */
  take(hash: string): number {
    const known = this.lookup(hash);
    if (known !== undefined) return known;
    let entry = this.#free.pop();
    if (entry === undefined) {
      const [oldHash, oldEntry] = this.#byHash.entries().next().value as [string, number];
      this.#byHash.delete(oldHash);
      entry = oldEntry;
    }
    this.#byHash.set(hash, entry);
    return entry;
  }
}
