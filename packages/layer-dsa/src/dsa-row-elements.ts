import { elementAt, elementWriter, floatBytes, readElements, type DeviceMemoryView, type DevicePtr, type FloatDtype } from '@metrale/core';

// Row-typed buffers of the CPU twins (qr, qb, olat): elements of core's FLOAT_DTYPE_CODE (0 f32,
// 1 bf16, 2 f16), read as f32 values and stored with one rounding, as the kernels'
// metrale::load_element / store_element do (core's row-element helpers, by code and element offset).

/** Kept beside core's rowDtypeOf because DSA's twins never rejected a code: any code but 0 and 1 reads as f16. */
function rowTypeOfCode(code: number): FloatDtype {
  return code === 0 ? 'f32' : code === 1 ? 'bf16' : 'f16';
}

/** Bytes of one element of FLOAT_DTYPE_CODE `code`. */
export function rowElementBytes(code: number): number {
  return floatBytes(rowTypeOfCode(code));
}

/**
 * `count` elements from element `start` of the buffer at `base`, as f32 values. For f32 this is
 * the memory itself (a view: do not write through it); bf16 and f16 are decoded into a copy.
 */
export function loadRowElements(mem: DeviceMemoryView, base: DevicePtr, start: number, count: number, code: number): Float32Array {
  const dtype = rowTypeOfCode(code);
  return readElements(mem, elementAt(base, start, dtype), count, dtype);
}

/**
 * Stores values[off … off + count) into elements start … start + count of the buffer at `base`:
 * each value is rounded to f32, then (bf16, f16) to nearest even, as a kernel that computed it in
 * f32 stores it.
 */
export function storeRowElements(
  mem: DeviceMemoryView, base: DevicePtr, start: number, values: ArrayLike<number>, off: number, count: number, code: number,
): void {
  const dtype = rowTypeOfCode(code);
  const store = elementWriter(mem, elementAt(base, start, dtype), count, dtype);
  for (let i = 0; i < count; i++) store(i, values[off + i]!);
}
