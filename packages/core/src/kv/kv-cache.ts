import type { GpuBackend, Stream } from '../device/gpu-backend.js';
import { InvalidArgumentError, KvCacheFullError } from '../errors.js';
import { BlockTable } from './block-table.js';
import { PagePool } from './page-pool.js';
import { SnapshotStore } from './snapshot-store.js';

export interface KvCacheShape {
  readonly maxSeqs: number;
  readonly maxSeqLen: number;
  readonly pageSize: number;
  readonly pages: number;
  /** Snapshot entries of recurrent state (0: none). */
  readonly snapshots: number;
}

/**
 * The KV cache of a model as the step driver runs it: one page pool shared by every paged layer,
 * the block table their kernels read, the pages each slot holds (in block order), and the
 * snapshot entries of recurrent layers. Full blocks are known by content hash, so a sequence may
 * start on pages another one filled (prefix caching). Layers' storage is theirs; this is the
 * bookkeeping, the same for all of them.
 */
export class KvCache {
  readonly pageSize: number;
  readonly pages: number;
  readonly pagesPerSeq: number;
  readonly snapshotCount: number;
  readonly table: BlockTable;
  readonly #pool: PagePool;
  readonly #snapshots: SnapshotStore | undefined;
  /** Per slot: its pages in block order, and how many of its first blocks are registered by hash. */
  readonly #slots: number[][];
  readonly #registered: Int32Array;

  constructor(gpu: GpuBackend, shape: KvCacheShape) {
    const { maxSeqs, maxSeqLen, pageSize, pages, snapshots } = shape;
    if (!Number.isSafeInteger(pageSize) || pageSize < 1) throw new InvalidArgumentError(`kv cache: pageSize must be a positive integer, got ${pageSize}`);
    if (!Number.isSafeInteger(snapshots) || snapshots < 0) throw new InvalidArgumentError(`kv cache: snapshots must be a non-negative integer, got ${snapshots}`);
    this.pageSize = pageSize;
    this.pagesPerSeq = Math.ceil(maxSeqLen / pageSize);
    this.#pool = new PagePool(pages);
    this.pages = pages;
    this.snapshotCount = snapshots;
    this.#snapshots = snapshots > 0 ? new SnapshotStore(snapshots) : undefined;
    this.table = new BlockTable(gpu, maxSeqs, this.pagesPerSeq);
    this.#slots = Array.from({ length: maxSeqs }, () => []);
    this.#registered = new Int32Array(maxSeqs);
  }

  /** Pages that hold `rows` rows (at most a slot's table width). */
  pagesFor(rows: number): number {
    return Math.min(this.pagesPerSeq, Math.ceil(rows / this.pageSize));
  }

  /** Pages a sequence could get now (free, or cached and held by nobody). */
  get available(): number {
    return this.#pool.available;
  }

  /** The share of pages held by running sequences (vLLM's KV-cache usage: 1 is full). */
  get usage(): number {
    return this.#pool.held / this.pages;
  }

  /** Full blocks known by content hash. */
  get cachedBlocks(): number {
    return this.#pool.cachedBlocks;
  }

  held(slot: number): number {
    return this.#slots[slot]!.length;
  }

  /** More pages `slot` needs to hold `rows` rows. */
  need(slot: number, rows: number): number {
    return Math.max(0, this.pagesFor(rows) - this.#slots[slot]!.length);
  }

  /**
   * Gives each `slots[i]` the pages for its first `rows[i]` rows, writing their table entries.
   * Throws `KvCacheFullError` before taking any page when the pool cannot give them all.
   */
  grow(slots: readonly number[], rows: readonly number[]): void {
    let total = 0;
    for (let i = 0; i < slots.length; i++) total += this.need(slots[i]!, rows[i]!);
    if (total > this.#pool.available) {
      throw new KvCacheFullError(total, this.#pool.available, this.pages, this.pageSize);
    }
    for (let i = 0; i < slots.length; i++) {
      const slot = slots[i]!;
      const owned = this.#slots[slot]!;
      for (let more = this.need(slot, rows[i]!); more > 0; more--) {
        const page = this.#pool.allocate();
        this.table.set(slot, owned.length, page);
        owned.push(page);
      }
    }
  }

  /**
   * How many leading blocks of `hashes` the cache holds, and so how many a new sequence could
   * start on. With `snapshots`, only up to a block whose end has a saved recurrent state.
   */
  match(hashes: readonly string[], snapshots: boolean): number {
    let n = 0;
    while (n < hashes.length && this.#pool.lookup(hashes[n]!) !== undefined) n++;
    if (!snapshots) return n;
    const store = this.#snapshots;
    if (!store) return 0;
    while (n > 0 && !store.has(hashes[n - 1]!)) n--;
    return n;
  }

  /** Pages a sequence starting on `hashes`' blocks would take from those available (cached ones nobody holds). */
  idleAmong(hashes: readonly string[]): number {
    let n = 0;
    for (const h of hashes) {
      const page = this.#pool.lookup(h);
      if (page !== undefined && this.#pool.holders(page) === 0) n++;
    }
    return n;
  }

  /** An empty slot starts on the cached blocks of `hashes` (each must be cached: see `match`); returns the rows they hold. */
  attach(slot: number, hashes: readonly string[]): number {
    const owned = this.#slots[slot]!;
    if (owned.length > 0) throw new InvalidArgumentError(`kv cache: slot ${slot} already holds ${owned.length} page(s); a cached prefix starts an empty slot`);
    if (hashes.length > this.pagesPerSeq) throw new InvalidArgumentError(`kv cache: a prefix of ${hashes.length} blocks exceeds a slot's ${this.pagesPerSeq}`);
    const pages = hashes.map((h, b) => {
      const page = this.#pool.lookup(h);
      if (page === undefined) throw new InvalidArgumentError(`kv cache: block ${b} of the prefix is not cached; start only on the blocks match() counts`);
      return page;
    });
    for (const page of pages) {
      this.#pool.retain(page);
      this.table.set(slot, owned.length, page);
      owned.push(page);
    }
    this.#registered[slot] = pages.length;
    return pages.length * this.pageSize;
  }

  /**
   * Records the content hashes of `slot`'s first `blocks` blocks, which must be full and computed
   * (`hashes[b]` for block b; those already recorded are skipped), so that later sequences may
   * start on them.
   */
  register(slot: number, hashes: readonly string[], blocks: number): void {
    const owned = this.#slots[slot]!;
    const upTo = Math.min(blocks, hashes.length, owned.length);
    for (let b = this.#registered[slot]!; b < upTo; b++) this.#pool.register(owned[b]!, hashes[b]!);
    this.#registered[slot] = Math.max(this.#registered[slot]!, upTo);
  }

  /** The slot's sequence ended: its pages go back, the last block first (so a prefix outlives its tail). */
  release(slot: number): void {
    const owned = this.#slots[slot]!;
    while (owned.length) this.#pool.release(owned.pop()!);
    this.#registered[slot] = 0;
  }

  /** The snapshot entry of the state at the end of block `hash`, if one is saved. */
  snapshotOf(hash: string): number | undefined {
    return this.#snapshots?.lookup(hash);
  }

  /** The entry to save the state at the end of block `hash` into (reusing the least recently used one). */
  snapshotEntry(hash: string): number {
    if (!this.#snapshots) throw new InvalidArgumentError('kv cache: no snapshot entries were made (snapshots: 0)');
    return this.#snapshots.take(hash);
  }

  /** Uploads the table entries changed since the last flush, on `stream`. */
  flush(stream: Stream): void {
    this.table.flush(stream);
  }

  dispose(): void {
    this.table.dispose();
  }
}
