import type { DeviceMemoryView, DevicePtr } from '@metrale/core';
import type { MemoryArena } from './memory-arena.js';

/**
 * The `mem` a CPU kernel receives: every window is checked against the arena and errors name the
 * launch (`launch gdn.decode: mem.f32`), so a bad pointer is traced to the kernel that used it.
 */
export class CheckedMemoryView implements DeviceMemoryView {
  constructor(
    private readonly arena: MemoryArena,
    private readonly call: string,
  ) {}

  f64(ptr: DevicePtr, count: number): Float64Array { return this.arena.typed(`${this.call}: mem.f64`, ptr, count, Float64Array); }
  f32(ptr: DevicePtr, count: number): Float32Array { return this.arena.typed(`${this.call}: mem.f32`, ptr, count, Float32Array); }
  i32(ptr: DevicePtr, count: number): Int32Array { return this.arena.typed(`${this.call}: mem.i32`, ptr, count, Int32Array); }
  u32(ptr: DevicePtr, count: number): Uint32Array { return this.arena.typed(`${this.call}: mem.u32`, ptr, count, Uint32Array); }
  u16(ptr: DevicePtr, count: number): Uint16Array { return this.arena.typed(`${this.call}: mem.u16`, ptr, count, Uint16Array); }
  u8(ptr: DevicePtr, count: number): Uint8Array { return this.arena.typed(`${this.call}: mem.u8`, ptr, count, Uint8Array); }
  i64(ptr: DevicePtr, count: number): BigInt64Array { return this.arena.typed(`${this.call}: mem.i64`, ptr, count, BigInt64Array); }
  u64(ptr: DevicePtr, count: number): BigUint64Array { return this.arena.typed(`${this.call}: mem.u64`, ptr, count, BigUint64Array); }
}
