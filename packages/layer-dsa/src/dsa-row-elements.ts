import { bf16BitsToF32, f16BitsToF32, f32ToBf16Bits, f32ToF16Bits, type DeviceMemoryView, type DevicePtr } from '@metrale/core';

// Row-typed buffers of the CPU twins (qr, qb, olat): elements of core's FLOAT_DTYPE_CODE (0 f32,
// 1 bf16, 2 f16), read as f32 values and stored with one rounding, as the kernels'
// metrale::load_element / store_element do.

/** Bytes of one element of FLOAT_DTYPE_CODE `code`. */
export function rowElementBytes(code: number): number {
  return code === 0 ? 4 : 2;
}

/**
 * `count` elements from element `start` of the buffer at `base`, as f32 values. For f32 this is
 * the memory itself (a view: do not write through it); bf16 and f16 are decoded into a copy.
 */
export function loadRowElements(mem: DeviceMemoryView, base: DevicePtr, start: number, count: number, code: number): Float32Array {
  if (code === 0) return mem.f32(base + BigInt(start * 4), count);
  const bits = mem.u16(base + BigInt(start * 2), count);
  const out = new Float32Array(count);
  const decode = code === 1 ? bf16BitsToF32 : f16BitsToF32;
  for (let i = 0; i < count; i++) out[i] = decode(bits[i]!);
  return out;
}

/**
 * Stores values[off … off + count) into elements start … start + count of the buffer at `base`:
 * each value is rounded to f32, then (bf16, f16) to nearest even, as a kernel that computed it in
 * f32 stores it.
 */
export function storeRowElements(
  mem: DeviceMemoryView, base: DevicePtr, start: number, values: ArrayLike<number>, off: number, count: number, code: number,
): void {
  if (code === 0) {
    const dst = mem.f32(base + BigInt(start * 4), count);
    for (let i = 0; i < count; i++) dst[i] = values[off + i]!;
    return;
  }
  const dst = mem.u16(base + BigInt(start * 2), count);
  const encode = code === 1 ? f32ToBf16Bits : f32ToF16Bits;
  for (let i = 0; i < count; i++) dst[i] = encode(Math.fround(values[off + i]!));
}
