import {
  FLOAT_DTYPE_CODE, InvalidArgumentError, bf16BitsToF32, f16BitsToF32, f32ToBf16Bits, f32ToF16Bits, roundTo, type DeviceMemoryView, type FloatDtype,
} from '@metrale/core';

// How the CPU twins of kernels/altup.cu and kernels/gemma3n-rows.cu read and write rows of a row
// type (a dtype code: 0 f32, 1 bf16, 2 f16): values as f64, each stored value rounded once
// (nearest even), as the kernels do.

const ROW_DTYPES: readonly FloatDtype[] = ['f32', 'bf16', 'f16'];

/** The row type of a dtype code; throws on any other code (the CUDA kernels trap). */
export function rowDtypeOf(code: number): FloatDtype {
  const dtype = ROW_DTYPES[code];
  if (dtype === undefined || FLOAT_DTYPE_CODE[dtype] !== code) throw new InvalidArgumentError(`dtype code ${code} is not a row type (0 f32, 1 bf16, 2 f16)`);
  return dtype;
}

/** `count` elements of `dtype` at `ptr`, as a read and a write (rounded) of element i. */
export function rowAccess(mem: DeviceMemoryView, ptr: bigint, count: number, dtype: FloatDtype): { get: (i: number) => number; set: (i: number, v: number) => void } {
  if (dtype === 'f32') {
    const v = mem.f32(ptr, count);
    return { get: (i) => v[i]!, set: (i, x) => void (v[i] = x) };
  }
  const bits = mem.u16(ptr, count);
  const [decode, encode] = dtype === 'bf16' ? [bf16BitsToF32, f32ToBf16Bits] : [f16BitsToF32, f32ToF16Bits];
  return { get: (i) => decode(bits[i]!), set: (i, x) => void (bits[i] = encode(x)) };
}

/** A value the kernel rounds to the row type without storing it (as Hugging Face holds it in that type); nothing in f32. */
export function roundRows(dtype: FloatDtype, x: number): number {
  return dtype === 'f32' ? x : roundTo(dtype, x);
}
