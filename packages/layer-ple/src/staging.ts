import type { GpuBackend, GpuEvent, HostBuffer, Stream } from '@metrale/core';

/**
 * Pinned host staging for asynchronous uploads: one page-locked buffer cut into `chunks` chunks
 * used in turn. A chunk is written only after the copies that last read it have run (an event
 * recorded after them on the stream), so the host may stage step n+1 while step n's copies are
 * still queued; the host waits only when it runs a whole ring ahead of the device.
 */
export class StagingRing {
  readonly buffer: HostBuffer;
  readonly chunkBytes: number;
  readonly #events: GpuEvent[];
  readonly #used: boolean[];
  #next = 0;
  /** Times `acquire` had to wait for the device. */
  waits = 0;

  constructor(
    private readonly gpu: GpuBackend,
    chunks: number,
    chunkBytes: number,
  ) {
    this.chunkBytes = chunkBytes;
    this.buffer = gpu.allocHost(chunks * chunkBytes);
    this.#events = [];
    try {
      for (let i = 0; i < chunks; i++) this.#events.push(gpu.createEvent());
    } catch (error) {
      this.dispose();
      throw error;
    }
    this.#used = new Array<boolean>(chunks).fill(false);
  }

  get chunks(): number {
    return this.#used.length;
  }

  /** The next chunk, once the device has read what was last staged in it; returns its byte offset. */
  acquire(): number {
    const i = this.#next;
    this.#next = (i + 1) % this.#used.length;
    if (this.#used[i]) {
      this.waits++;
      this.gpu.synchronizeEvent(this.#events[i]!);
      this.#used[i] = false;
    }
    return i * this.chunkBytes;
  }

  /** Marks the chunk at `offset` as read by the copies enqueued on `stream` so far. */
  release(offset: number, stream: Stream): void {
    const i = offset / this.chunkBytes;
    this.gpu.recordEvent(this.#events[i]!, stream);
    this.#used[i] = true;
  }

  dispose(): void {
    for (const e of this.#events.splice(0)) this.gpu.destroyEvent(e);
    this.gpu.freeHost(this.buffer);
  }
}
