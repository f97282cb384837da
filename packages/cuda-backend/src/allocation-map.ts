// The backend's live device allocations with their requested sizes, sorted by address, so that
// copies and GEMMs can check that a range lies inside one allocation (as the CPU backend does)
// and memoryDigest can walk them in a stable order.
import type { DevicePtr } from '@metrale/core';

export class AllocationMap {
  readonly #sizes = new Map<DevicePtr, number>();
  #starts: DevicePtr[] = [];

  get size(): number {
    return this.#sizes.size;
  }

  has(ptr: DevicePtr): boolean {
    return this.#sizes.has(ptr);
  }

  add(ptr: DevicePtr, bytes: number): void {
    this.#sizes.set(ptr, bytes);
    this.#starts.splice(this.#upperBound(ptr), 0, ptr);
  }

  delete(ptr: DevicePtr): boolean {
    if (!this.#sizes.delete(ptr)) return false;
    this.#starts.splice(this.#upperBound(ptr) - 1, 1);
    return true;
  }

  /** Whether [ptr, ptr + bytes) lies inside one live allocation. */
  contains(ptr: DevicePtr, bytes: number): boolean {
    const i = this.#upperBound(ptr) - 1;
    if (i < 0) return false;
    const start = this.#starts[i]!;
    return ptr + BigInt(bytes) <= start + BigInt(this.#sizes.get(start)!);
  }

  /** [pointer, requested bytes] in address order. */
  *entries(): IterableIterator<[DevicePtr, number]> {
    for (const start of this.#starts) yield [start, this.#sizes.get(start)!];
  }

  clear(): void {
    this.#sizes.clear();
    this.#starts = [];
  }

  /** Index of the first start greater than ptr. */
  #upperBound(ptr: DevicePtr): number {
    let lo = 0, hi = this.#starts.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.#starts[mid]! <= ptr) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }
}
