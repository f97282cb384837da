import type { DevicePtr } from '../device/device-ptr.js';
import type { GpuBackend, HostBuffer, Stream } from '../device/gpu-backend.js';

/**
 * The block table kernels read: i32 [maxSeqs][pagesPerSeq], slot and block → page, on the device
 * at a fixed address, with a pinned host mirror. Entries change only when a slot gets a page for
 * a block past its others, or when a slot starts a new sequence; each slot's changed range is
 * uploaded by `flush`, in stream order, before the step that needs it.
 */
export class BlockTable {
  readonly device: DevicePtr;
  readonly pagesPerSeq: number;
  readonly #host: HostBuffer;
  readonly #mirror: Int32Array;
  /** Per slot, the changed entries not yet uploaded: [from, to), or from ≥ to when none. */
  readonly #dirtyFrom: Int32Array;
  readonly #dirtyTo: Int32Array;
  readonly #dirtySlots = new Set<number>();

  constructor(
    private readonly gpu: GpuBackend,
    maxSeqs: number,
    pagesPerSeq: number,
  ) {
    this.pagesPerSeq = pagesPerSeq;
    const words = maxSeqs * pagesPerSeq;
    this.device = gpu.alloc(4 * words);
    try {
      this.#host = gpu.allocHost(4 * words);
    } catch (error) {
      gpu.free(this.device);
      throw error;
    }
    this.#mirror = new Int32Array(this.#host.bytes.buffer, this.#host.bytes.byteOffset, words);
    this.#mirror.fill(0);
    // Every entry starts as a valid page (0), so a kernel that reads past a sequence's pages stays in bounds.
    gpu.memsetAsync(this.device, 0, 4 * words, gpu.defaultStream);
    gpu.synchronize(gpu.defaultStream);
    this.#dirtyFrom = new Int32Array(maxSeqs).fill(pagesPerSeq);
    this.#dirtyTo = new Int32Array(maxSeqs);
  }

  /** Writes entry (slot, block) in the mirror; `flush` uploads it. */
  set(slot: number, block: number, page: number): void {
    this.#mirror[slot * this.pagesPerSeq + block] = page;
    if (block < this.#dirtyFrom[slot]!) this.#dirtyFrom[slot] = block;
    if (block + 1 > this.#dirtyTo[slot]!) this.#dirtyTo[slot] = block + 1;
    this.#dirtySlots.add(slot);
  }

  get(slot: number, block: number): number {
    return this.#mirror[slot * this.pagesPerSeq + block]!;
  }

  /** Enqueues the upload of every changed range on `stream`. */
  flush(stream: Stream): void {
    for (const slot of this.#dirtySlots) {
      const from = this.#dirtyFrom[slot]!;
      const offset = 4 * (slot * this.pagesPerSeq + from);
      this.gpu.copyToDeviceAsync(this.device + BigInt(offset), this.#host, offset, 4 * (this.#dirtyTo[slot]! - from), stream);
      this.#dirtyFrom[slot] = this.pagesPerSeq;
      this.#dirtyTo[slot] = 0;
    }
    this.#dirtySlots.clear();
  }

  dispose(): void {
    this.gpu.free(this.device);
    this.gpu.freeHost(this.#host);
  }
}
