import { InvalidArgumentError, type DevicePtr, type GpuBackend, type HostBuffer, type Stream } from '@metrale/core';

/**
 * The page pool of a paged KV cache: `pages` pages of `pageSize` rows, handed to sequence slots as
 * they grow, and the block table (i32 [maxSeqs][pagesPerSeq]: slot, page index → pool page) that
 * kernels read. The table has a pinned host mirror; an entry is written once when its page is
 * handed out and uploaded (in stream order) before any kernel can read it: at prestage for decode
 * and verify (before capture or replay), in the eager forward for prefill.
 */
export class KvPages {
  readonly pageSize: number;
  readonly pagesPerSeq: number;
  readonly pages: number;
  readonly table: DevicePtr;
  readonly #host: HostBuffer;
  readonly #mirror: Int32Array;
  readonly #free: number[];
  readonly #owned: number[][];

  constructor(
    private readonly gpu: GpuBackend,
    maxSeqs: number,
    maxSeqLen: number,
    pageSize: number,
    pages?: number,
  ) {
    if (!Number.isInteger(pageSize) || pageSize < 1) throw new InvalidArgumentError(`kv pages: pageSize must be a positive integer, got ${pageSize}`);
    this.pageSize = pageSize;
    this.pagesPerSeq = Math.ceil(maxSeqLen / pageSize);
    this.pages = pages ?? maxSeqs * this.pagesPerSeq;
    if (!Number.isInteger(this.pages) || this.pages < 1) throw new InvalidArgumentError(`kv pages: the pool needs at least one page, got ${this.pages}`);
    const words = maxSeqs * this.pagesPerSeq;
    this.table = gpu.alloc(4 * words);
    this.#host = gpu.allocHost(4 * words);
    this.#mirror = new Int32Array(this.#host.bytes.buffer, this.#host.bytes.byteOffset, words);
    this.#mirror.fill(0);
    // Every entry starts valid (page 0): a kernel reading past a sequence's pages stays in bounds.
    gpu.upload(this.table, this.#mirror);
    this.#free = Array.from({ length: this.pages }, (_, i) => this.pages - 1 - i);
    this.#owned = Array.from({ length: maxSeqs }, () => []);
  }

  /** Pages held by a slot. */
  held(slot: number): number {
    return this.#owned[slot]!.length;
  }

  /**
   * Gives `slot` pages for its first `rows` rows (capped at the table's width) and uploads the new
   * table entries on `stream`. Throws before changing anything when the pool is too small.
   */
  ensure(slot: number, rows: number, stream: Stream): void {
    const owned = this.#owned[slot]!;
    const need = Math.min(this.pagesPerSeq, Math.ceil(rows / this.pageSize));
    if (need <= owned.length) return;
    const more = need - owned.length;
    if (more > this.#free.length) {
      throw new InvalidArgumentError(`kv pages: slot ${slot} needs ${more} more page(s) of ${this.pageSize} rows, but ${this.#free.length} of ${this.pages} are free; create the layer with more pages`);
    }
    const first = owned.length;
    for (let i = 0; i < more; i++) {
      const page = this.#free.pop()!;
      owned.push(page);
      this.#mirror[slot * this.pagesPerSeq + first + i] = page;
    }
    const offset = 4 * (slot * this.pagesPerSeq + first);
    this.gpu.copyToDeviceAsync(this.table + BigInt(offset), this.#host, offset, 4 * more, stream);
  }

  /** The slot's sequence ended: its pages return to the pool (their table entries stay until reused). */
  release(slot: number): void {
    const owned = this.#owned[slot]!;
    while (owned.length) this.#free.push(owned.pop()!);
  }

  dispose(): void {
    this.gpu.free(this.table);
    this.gpu.freeHost(this.#host);
  }
}
