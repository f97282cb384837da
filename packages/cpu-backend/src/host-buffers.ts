import { DeviceError, type HostBuffer } from '@metrale/core';
import { checkCount, INVALID_VALUE } from './memory-arena.js';

/**
 * "Pinned" host buffers. Plain memory stands in for page-locked memory, but only buffers made by
 * `allocHost` are accepted by asynchronous copies: on a GPU an async copy from pageable memory is
 * a different (synchronous, capture-breaking) operation, so a hand-made `{ bytes }` is a bug.
 */
export class HostBuffers {
  readonly #live = new Set<HostBuffer>();
  readonly #freed = new WeakSet<HostBuffer>();
  #liveBytes = 0;

  get liveBytes(): number { return this.#liveBytes; }

  alloc(call: string, bytes: number): HostBuffer {
    checkCount(call, 'byte count', bytes);
    const buffer: HostBuffer = Object.freeze({ bytes: new Uint8Array(bytes) });
    this.#live.add(buffer);
    this.#liveBytes += bytes;
    return buffer;
  }

  free(call: string, buffer: HostBuffer): void {
    this.#check(call, buffer);
    this.#release(buffer);
  }

  freeAll(): void {
    for (const b of [...this.#live]) this.#release(b);
  }

  /** The checked byte range `[offset, offset + bytes)` of a live buffer. */
  range(call: string, buffer: HostBuffer, offset: number, bytes: number): Uint8Array {
    this.#check(call, buffer);
    checkCount(call, 'host offset', offset);
    checkCount(call, 'byte count', bytes);
    const size = buffer.bytes.byteLength;
    if (offset + bytes > size) {
      throw new DeviceError(call, `host range [${offset}, ${offset + bytes}) runs past the end of the ${size}-byte pinned buffer`, INVALID_VALUE);
    }
    return buffer.bytes.subarray(offset, offset + bytes);
  }

  #check(call: string, buffer: HostBuffer): void {
    if (this.#live.has(buffer)) return;
    const why = this.#freed.has(buffer)
      ? 'the pinned host buffer was already freed'
      : 'not a pinned host buffer of this backend (allocate it with allocHost)';
    throw new DeviceError(call, why, INVALID_VALUE);
  }

  #release(buffer: HostBuffer): void {
    this.#live.delete(buffer);
    this.#freed.add(buffer);
    this.#liveBytes -= buffer.bytes.byteLength;
    // Detach, so views the caller kept become empty rather than silently stale.
    const storage = buffer.bytes.buffer as ArrayBuffer;
    structuredClone(storage, { transfer: [storage] });
  }
}
