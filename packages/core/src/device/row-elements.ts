import { InvalidArgumentError } from '../errors.js';
import type { DevicePtr } from './device-ptr.js';
import { FLOAT_DTYPE_CODE, bf16BitsToF32, f16BitsToF32, f32ToBf16Bits, f32ToF16Bits, floatBytes, fromBf16, roundTo, type FloatDtype } from './dtype.js';
import type { DeviceMemoryView } from './memory-view.js';

// How CPU twins read and write the row-typed buffers of their kernels: rows, caches and
// intermediates of a row type (f32, bf16, f16, by the FLOAT_DTYPE_CODE a kernel takes). A twin
// computes in f64 and rounds where its kernel stores.

const ROW_DTYPES: readonly FloatDtype[] = ['f32', 'bf16', 'f16'];

/** The row type of a dtype code; throws on any other code (the CUDA kernels trap). */
export function rowDtypeOf(code: number): FloatDtype {
  const dtype = ROW_DTYPES[code];
  if (dtype === undefined || FLOAT_DTYPE_CODE[dtype] !== code) throw new InvalidArgumentError(`dtype code ${code} is not a row type (0 f32, 1 bf16, 2 f16)`);
  return dtype;
}

/** Reads element i of a row-typed buffer as its value. */
export type ElementRead = (i: number) => number;
/** Stores v as element i, rounded to the buffer's type (nearest even), as a kernel's store does. */
export type ElementWrite = (i: number, v: number) => void;
/** A read and a write of the same elements. */
export interface ElementAccess {
  readonly get: ElementRead;
  readonly set: ElementWrite;
}

/** `count` elements of `dtype` at `ptr`, read one at a time. */
export function elementReader(mem: DeviceMemoryView, ptr: DevicePtr, count: number, dtype: FloatDtype): ElementRead {
  if (dtype === 'f32') {
    const v = mem.f32(ptr, count);
    return (i) => v[i]!;
  }
  const bits = mem.u16(ptr, count);
  const decode = dtype === 'bf16' ? bf16BitsToF32 : f16BitsToF32;
  return (i) => decode(bits[i]!);
}

/** A store into `count` elements of `dtype` at `ptr`: f32 as a Float32Array stores it, 16-bit types rounded to nearest even. */
export function elementWriter(mem: DeviceMemoryView, ptr: DevicePtr, count: number, dtype: FloatDtype): ElementWrite {
  if (dtype === 'f32') {
    const v = mem.f32(ptr, count);
    return (i, x) => void (v[i] = x);
  }
  const bits = mem.u16(ptr, count);
  const encode = dtype === 'bf16' ? f32ToBf16Bits : f32ToF16Bits;
  return (i, x) => void (bits[i] = encode(x));
}

/** `count` elements of `dtype` at `ptr`, read and written one at a time (both views of the same memory). */
export function elementAccess(mem: DeviceMemoryView, ptr: DevicePtr, count: number, dtype: FloatDtype): ElementAccess {
  return { get: elementReader(mem, ptr, count, dtype), set: elementWriter(mem, ptr, count, dtype) };
}

/** `count` elements of `dtype` at `ptr` as f32 values: the buffer's own view for f32, a decoded copy otherwise. */
export function readElements(mem: DeviceMemoryView, ptr: DevicePtr, count: number, dtype: FloatDtype): Float32Array {
  if (dtype === 'f32') return mem.f32(ptr, count);
  const bits = mem.u16(ptr, count);
  if (dtype === 'bf16') return fromBf16(bits);
  const out = new Float32Array(count);
  for (let i = 0; i < count; i++) out[i] = f16BitsToF32(bits[i]!);
  return out;
}

/** Byte address of element `index` of a `dtype` buffer. */
export function elementAt(ptr: DevicePtr, index: number, dtype: FloatDtype): DevicePtr {
  return ptr + BigInt(index * floatBytes(dtype));
}

/**
 * A value the kernel rounds to the row type without storing it (x̂ before RMSNorm's weight, the
 * normed q and k before RoPE, a value Hugging Face holds in that type): rounded for bf16 and f16;
 * in f32 the kernel's own f32 arithmetic is that rounding, which the twin (in f64) leaves out.
 */
export function roundRows(dtype: FloatDtype, x: number): number {
  return dtype === 'f32' ? x : roundTo(dtype, x);
}
