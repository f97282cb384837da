import {
  E4M3_VALUES, FP8_BLOCK, FLOAT_DTYPE_CODE, InvalidArgumentError, bf16BitsToF32, fromBf16, f16BitsToF32, f32ToBf16Bits, f32ToF16Bits, floatBytes, roundTo,
  type DeviceMemoryView, type FloatDtype, type WeightDtype,
} from '@metrale/core';

// How the CPU twins read and write the typed buffers of the kernels (kernels/std-common.cuh): rows,
// caches and intermediates of a row type (f32, bf16, f16, by the dtype code a kernel takes), weights
// of a weight type (those, or FP8 E4M3 codes with f32 128 × 128 block scales). A twin computes in
// f64 and rounds where its kernel stores.

/** The codes expert kernels take for their weights: FLOAT_DTYPE_CODE, and 3 for FP8 E4M3. */
export const WEIGHT_DTYPE_CODE: Readonly<Record<WeightDtype, number>> = { ...FLOAT_DTYPE_CODE, f8e4m3: 3 };

const ROW_DTYPES: readonly FloatDtype[] = ['f32', 'bf16', 'f16'];

/** The row type of a dtype code; throws on any other code (the CUDA kernels trap). */
export function rowDtypeOf(code: number): FloatDtype {
  const dtype = ROW_DTYPES[code];
  if (dtype === undefined || FLOAT_DTYPE_CODE[dtype] !== code) throw new InvalidArgumentError(`dtype code ${code} is not a row type (0 f32, 1 bf16, 2 f16)`);
  return dtype;
}

/** The weight type of a weight code; throws on any other code. */
export function weightDtypeOf(code: number): WeightDtype {
  return code === WEIGHT_DTYPE_CODE.f8e4m3 ? 'f8e4m3' : rowDtypeOf(code);
}

/** Reads element i of a row-typed buffer as its value. */
export type ElementRead = (i: number) => number;
/** Stores v as element i, rounded to the buffer's type (nearest even), as store_value does. */
export type ElementWrite = (i: number, v: number) => void;

/** `count` elements of `dtype` at `ptr`, read one at a time. */
export function elementReader(mem: DeviceMemoryView, ptr: bigint, count: number, dtype: FloatDtype): ElementRead {
  if (dtype === 'f32') {
    const v = mem.f32(ptr, count);
    return (i) => v[i]!;
  }
  const bits = mem.u16(ptr, count);
  const decode = dtype === 'bf16' ? bf16BitsToF32 : f16BitsToF32;
  return (i) => decode(bits[i]!);
}

/** `count` elements of `dtype` at `ptr` as f32 values: the buffer's own view for f32, a decoded copy otherwise. */
export function readElements(mem: DeviceMemoryView, ptr: bigint, count: number, dtype: FloatDtype): Float32Array {
  if (dtype === 'f32') return mem.f32(ptr, count);
  const bits = mem.u16(ptr, count);
  if (dtype === 'bf16') return fromBf16(bits);
  const out = new Float32Array(count);
  for (let i = 0; i < count; i++) out[i] = f16BitsToF32(bits[i]!);
  return out;
}

/** A store into `count` elements of `dtype` at `ptr`: f32 as a Float32Array stores it, 16-bit types rounded to nearest even. */
export function elementWriter(mem: DeviceMemoryView, ptr: bigint, count: number, dtype: FloatDtype): ElementWrite {
  if (dtype === 'f32') {
    const v = mem.f32(ptr, count);
    return (i, x) => void (v[i] = x);
  }
  const bits = mem.u16(ptr, count);
  const encode = dtype === 'bf16' ? f32ToBf16Bits : f32ToF16Bits;
  return (i, x) => void (bits[i] = encode(x));
}

/** Byte address of element `index` of a `dtype` buffer. */
export function elementAt(ptr: bigint, index: number, dtype: FloatDtype): bigint {
  return ptr + BigInt(index * floatBytes(dtype));
}

/**
 * A value the kernel rounds to the row type without storing it (x̂ before RMSNorm's weight, the
 * normed q and k before RoPE): rounded for bf16 and f16; in f32 the kernel's own f32 arithmetic is
 * that rounding, which the twin (in f64) leaves out, as it always has.
 */
export function roundRows(dtype: FloatDtype, x: number): number {
  return dtype === 'f32' ? x : roundTo(dtype, x);
}

/**
 * How the block scales of a stack of FP8 weights are laid out: `parts` matrices of `partRows` ×
 * `cols` per item (an expert's gate and up: 2 parts of I rows; its down: 1 part of D rows), each
 * with its own [⌈partRows/128⌉][⌈cols/128⌉] grid, items after one another.
 */
export interface ScaleGrid {
  readonly parts: number;
  readonly partRows: number;
  readonly cols: number;
}

/**
 * Item `item`'s [parts · partRows][cols] weight values: float weights as stored (the buffer's own
 * view for f32), FP8 codes times their block scales, exactly (f64).
 */
export function weightMatrix(mem: DeviceMemoryView, data: bigint, scales: bigint, dtype: WeightDtype, item: number, grid: ScaleGrid): Float32Array | Float64Array {
  const rows = grid.parts * grid.partRows;
  const n = rows * grid.cols;
  if (dtype !== 'f8e4m3') {
    const bytes = floatBytes(dtype);
    return readElements(mem, data + BigInt(item * n * bytes), n, dtype);
  }
  const codes = mem.u8(data + BigInt(item * n), n);
  const bR = Math.ceil(grid.partRows / FP8_BLOCK);
  const bC = Math.ceil(grid.cols / FP8_BLOCK);
  const s = mem.f32(scales + BigInt(4 * item * grid.parts * bR * bC), grid.parts * bR * bC);
  const out = new Float64Array(n);
  for (let r = 0; r < rows; r++) {
    const part = Math.floor(r / grid.partRows);
    const sRow = (part * bR + Math.floor((r - part * grid.partRows) / FP8_BLOCK)) * bC;
    for (let c = 0; c < grid.cols; c++) out[r * grid.cols + c] = E4M3_VALUES[codes[r * grid.cols + c]!]! * s[sRow + Math.floor(c / FP8_BLOCK)]!;
  }
  return out;
}
