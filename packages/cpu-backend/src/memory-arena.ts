import { createHash } from 'node:crypto';
import { DeviceError, InvalidArgumentError, type DevicePtr } from '@metrale/core';

/** Where the first allocation goes: far from 0n so a null or small integer is never a valid pointer. */
const BASE_ADDRESS = 0x7f00_0000_0000n;
/** cudaMalloc returns 256-byte aligned pointers. */
const ALIGN = 256n;
/** Unmapped bytes after every allocation, so an overrun lands in no allocation at all. */
const GUARD_BYTES = 4096n;

export const ILLEGAL_ADDRESS = 'CUDA_ERROR_ILLEGAL_ADDRESS';
export const INVALID_VALUE = 'CUDA_ERROR_INVALID_VALUE';

export const hex = (p: bigint): string => `0x${p.toString(16)}`;

interface Allocation {
  readonly base: bigint;
  readonly size: number;
  readonly end: bigint;
  readonly storage: ArrayBuffer;
  freed: boolean;
}

/** A typed-array constructor usable over an ArrayBuffer window. */
export interface TypedArrayClass<T> {
  new (buffer: ArrayBuffer, byteOffset: number, length: number): T;
  readonly BYTES_PER_ELEMENT: number;
}

/** Checks a byte or element count: a non-negative safe integer. */
export function checkCount(call: string, what: string, n: unknown): number {
  if (typeof n !== 'number' || !Number.isSafeInteger(n) || n < 0) {
    throw new InvalidArgumentError(`${call}: ${what} must be a non-negative integer, got ${String(n)}`);
  }
  return n;
}

function checkPtr(call: string, ptr: unknown): bigint {
  if (typeof ptr !== 'bigint') throw new InvalidArgumentError(`${call}: a device pointer must be a bigint, got ${String(ptr)}`);
  return ptr;
}

const plural = (n: bigint | number, unit = 'byte'): string => `${n} ${unit}${n === 1 || n === 1n ? '' : 's'}`;

/**
 * Device memory: one ArrayBuffer per allocation, addressed by bigint pointers that are never
 * reused, so a stale pointer always hits a freed allocation (use after free) and an overrun always
 * hits a guard gap (out of range) instead of silently landing in a neighbour.
 */
export class MemoryArena {
  /** Every allocation ever made, in address order (addresses only grow, so appending keeps it sorted). */
  readonly #all: Allocation[] = [];
  readonly #live = new Map<bigint, Allocation>();
  #next = BASE_ADDRESS;
  #liveBytes = 0;
  #peakBytes = 0;
  /** The last allocation a lookup hit: kernels touch the same few buffers over and over. */
  #last: Allocation | undefined;

  constructor(
    readonly limitBytes: number,
    readonly fillByte: number,
  ) {}

  get liveBytes(): number { return this.#liveBytes; }
  get peakBytes(): number { return this.#peakBytes; }
  get liveAllocations(): number { return this.#live.size; }

  alloc(call: string, bytes: number): DevicePtr {
    checkCount(call, 'byte count', bytes);
    if (this.#liveBytes + bytes > this.limitBytes) {
      throw new DeviceError(call, `${plural(bytes)} requested, ${plural(this.#liveBytes)} of ${plural(this.limitBytes)} in use`, 'CUDA_ERROR_OUT_OF_MEMORY');
    }
    let storage: ArrayBuffer;
    try {
      storage = new ArrayBuffer(bytes);
    } catch (cause) {
      throw new DeviceError(call, `the host could not back ${plural(bytes)}`, 'CUDA_ERROR_OUT_OF_MEMORY', { cause });
    }
    // Device memory is uninitialised on a GPU: poison it so a read-before-write shows.
    if (this.fillByte !== 0) new Uint8Array(storage).fill(this.fillByte);
    const base = this.#next;
    const end = base + BigInt(bytes);
    this.#next = ((end + GUARD_BYTES + ALIGN - 1n) / ALIGN) * ALIGN;
    const a: Allocation = { base, size: bytes, end, storage, freed: false };
    this.#all.push(a);
    this.#live.set(base, a);
    this.#liveBytes += bytes;
    this.#peakBytes = Math.max(this.#peakBytes, this.#liveBytes);
    return base;
  }

  free(call: string, ptr: DevicePtr): void {
    checkPtr(call, ptr);
    const a = this.#live.get(ptr);
    if (!a) {
      const hit = this.#find(ptr);
      if (hit?.base === ptr) throw new DeviceError(call, `double free of allocation ${hex(ptr)} (${plural(hit.size)})`, INVALID_VALUE);
      const inside = hit && ptr < hit.end ? ` (it points inside allocation ${hex(hit.base)}; free takes the pointer alloc returned)` : '';
      throw new DeviceError(call, `${hex(ptr)} is not an allocation of this device${inside}`, INVALID_VALUE);
    }
    this.#release(a);
  }

  /** Frees every live allocation (dispose). */
  freeAll(): void {
    for (const a of [...this.#live.values()]) this.#release(a);
  }

  /** Checks that `bytes` bytes at `ptr` lie inside one live allocation. */
  check(call: string, ptr: DevicePtr, bytes: number): void {
    this.#resolve(call, ptr, bytes);
  }

  /** The exact byte range, checked. */
  bytes(call: string, ptr: DevicePtr, bytes: number): Uint8Array {
    const a = this.#resolve(call, ptr, bytes);
    return new Uint8Array(a.storage, Number(ptr - a.base), bytes);
  }

  /** An exact-length typed window, checked for range and for element alignment. */
  typed<T>(call: string, ptr: DevicePtr, count: number, type: TypedArrayClass<T>): T {
    checkCount(call, 'element count', count);
    const a = this.#resolve(call, ptr, count * type.BYTES_PER_ELEMENT);
    const offset = Number(ptr - a.base);
    if (offset % type.BYTES_PER_ELEMENT !== 0) {
      throw new DeviceError(call, `${hex(ptr)} is not aligned to ${type.BYTES_PER_ELEMENT} bytes (offset ${offset} in allocation ${hex(a.base)})`, 'CUDA_ERROR_MISALIGNED_ADDRESS');
    }
    return new type(a.storage, offset, count);
  }

  /** sha256 over every live allocation's address, size and contents, in address order. */
  digest(): string {
    const h = createHash('sha256');
    for (const a of this.#all) {
      if (a.freed) continue;
      h.update(`${hex(a.base)}:${a.size};`);
      h.update(new Uint8Array(a.storage));
    }
    return h.digest('hex');
  }

  #release(a: Allocation): void {
    a.freed = true;
    this.#live.delete(a.base);
    this.#liveBytes -= a.size;
    // Detach the storage: every view a kernel or test kept becomes empty instead of stale.
    structuredClone(a.storage, { transfer: [a.storage] });
  }

  /** The allocation with the greatest base ≤ ptr, live or freed. */
  #find(ptr: bigint): Allocation | undefined {
    const all = this.#all;
    let lo = 0;
    let hi = all.length - 1;
    let found: Allocation | undefined;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      const a = all[mid]!;
      if (a.base <= ptr) {
        found = a;
        lo = mid + 1;
      } else {
        hi = mid - 1;
      }
    }
    return found;
  }

  #resolve(call: string, ptr: DevicePtr, bytes: number): Allocation {
    checkPtr(call, ptr);
    checkCount(call, 'byte count', bytes);
    const end = ptr + BigInt(bytes);
    const last = this.#last;
    if (last && !last.freed && ptr >= last.base && end <= last.end) return last;
    const a = this.#find(ptr);
    const where = `${hex(ptr)} + ${plural(bytes)}`;
    if (!a) {
      const what = ptr === 0n ? 'the null pointer' : `below the first allocation${this.#all[0] ? ` (${hex(this.#all[0].base)})` : ' (none made yet)'}`;
      throw new DeviceError(call, `${where}: ${what} is not device memory`, ILLEGAL_ADDRESS);
    }
    const named = `allocation ${hex(a.base)} (${plural(a.size)}${a.freed ? ', freed' : ''})`;
    if (end <= a.end) {
      if (a.freed) throw new DeviceError(call, `${where} lies in ${named}: use after free`, ILLEGAL_ADDRESS);
      this.#last = a;
      return a;
    }
    if (ptr < a.end) {
      throw new DeviceError(call, `${where} runs ${plural(end - a.end)} past the end of ${named}, which ends at ${hex(a.end)}: out of range`, ILLEGAL_ADDRESS);
    }
    throw new DeviceError(call, `${where} starts ${plural(ptr - a.end)} past the end of ${named}, in unallocated memory: out of range`, ILLEGAL_ADDRESS);
  }
}
