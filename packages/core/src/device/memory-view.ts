import type { DevicePtr } from './device-ptr.js';

/**
 * Typed windows onto device memory, for the CPU implementations of kernels. Each call checks that
 * the whole range lies inside one live allocation and throws `DeviceError` otherwise; the view it
 * returns covers exactly that range.
 */
export interface DeviceMemoryView {
  f64(ptr: DevicePtr, count: number): Float64Array;
  f32(ptr: DevicePtr, count: number): Float32Array;
  i32(ptr: DevicePtr, count: number): Int32Array;
  u32(ptr: DevicePtr, count: number): Uint32Array;
  /** Raw 16-bit words: bf16 and f16 buffers are read through this. */
  u16(ptr: DevicePtr, count: number): Uint16Array;
  u8(ptr: DevicePtr, count: number): Uint8Array;
  i64(ptr: DevicePtr, count: number): BigInt64Array;
  /** Pointer tables. */
  u64(ptr: DevicePtr, count: number): BigUint64Array;
}
