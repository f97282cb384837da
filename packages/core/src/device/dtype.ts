/** Element types a tensor or kernel buffer can hold, with their sizes in bytes. */
export type DType = 'f64' | 'f32' | 'bf16' | 'f16' | 'f8e4m3' | 'i64' | 'i32' | 'u32' | 'i16' | 'u16' | 'i8' | 'u8' | 'bool';

export const DTYPE_BYTES: Readonly<Record<DType, number>> = {
  f64: 8, f32: 4, bf16: 2, f16: 2, f8e4m3: 1, i64: 8, i32: 4, u32: 4, i16: 2, u16: 2, i8: 1, u8: 1, bool: 1,
};

/** The floating types rows, caches and weights are stored in on a device. */
export type FloatDtype = 'f32' | 'bf16' | 'f16';

/** Bytes of one element of a `FloatDtype`. */
export function floatBytes(dtype: FloatDtype): number {
  return dtype === 'f32' ? 4 : 2;
}

/** The codes kernels take for a `FloatDtype` (0 f32, 1 bf16, 2 f16), the same in every package. */
export const FLOAT_DTYPE_CODE: Readonly<Record<FloatDtype, number>> = { f32: 0, bf16: 1, f16: 2 };

const f32Scratch = new Float32Array(1);
const u32Scratch = new Uint32Array(f32Scratch.buffer);

/** f32 → bf16 bits, rounding to nearest even (as PyTorch does); NaN stays NaN. */
export function f32ToBf16Bits(x: number): number {
  f32Scratch[0] = x;
  const bits = u32Scratch[0]!;
  if ((bits & 0x7f800000) === 0x7f800000 && (bits & 0x007fffff) !== 0) return ((bits >>> 16) | 0x0040) & 0xffff;
  const rounded = bits + 0x7fff + ((bits >>> 16) & 1);
  return (rounded >>> 16) & 0xffff;
}

/** bf16 bits → f32 value. */
export function bf16BitsToF32(bits: number): number {
  u32Scratch[0] = (bits & 0xffff) << 16;
  return f32Scratch[0]!;
}

/** f16 bits → f32 value (IEEE half). */
export function f16BitsToF32(bits: number): number {
  const sign = bits & 0x8000 ? -1 : 1;
  const exp = (bits >>> 10) & 0x1f;
  const frac = bits & 0x3ff;
  if (exp === 0) return sign * frac * 2 ** -24;
  if (exp === 0x1f) return frac ? Number.NaN : sign * Number.POSITIVE_INFINITY;
  return sign * (1 + frac / 1024) * 2 ** (exp - 15);
}

/** Encodes a whole f32 array as bf16 bits. */
export function toBf16(values: ArrayLike<number>): Uint16Array {
  const out = new Uint16Array(values.length);
  for (let i = 0; i < values.length; i++) out[i] = f32ToBf16Bits(values[i]!);
  return out;
}

/** Decodes bf16 bits into f32: a bf16 is the high half of the f32 it stands for. */
export function fromBf16(bits: ArrayLike<number>): Float32Array {
  const out = new Float32Array(bits.length);
  const words = new Uint32Array(out.buffer);
  for (let i = 0; i < bits.length; i++) words[i] = (bits[i]! & 0xffff) << 16;
  return out;
}

/** f32 → f16 bits, rounding to nearest even; overflow to ±Inf, NaN stays NaN (as PyTorch's .half()). */
export function f32ToF16Bits(x: number): number {
  f32Scratch[0] = x;
  const bits = u32Scratch[0]!;
  const sign = (bits >>> 16) & 0x8000;
  const exp = (bits >>> 23) & 0xff;
  const frac = bits & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (frac ? 0x200 : 0);
  const e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    // Subnormal: the implicit bit joins the fraction, shifted right with round-to-nearest-even.
    const m = frac | 0x800000;
    const shift = 14 - e;
    const half = 1 << (shift - 1);
    const rest = m & ((1 << shift) - 1);
    let v = m >>> shift;
    if (rest > half || (rest === half && (v & 1) === 1)) v++;
    return sign | v;
  }
  let v = (e << 10) | (frac >>> 13);
  const rest = frac & 0x1fff;
  if (rest > 0x1000 || (rest === 0x1000 && (v & 1) === 1)) v++; // may carry into the exponent: correct, up to Inf
  return sign | v;
}

/** Encodes an array as f16 bits. */
export function toF16(values: ArrayLike<number>): Uint16Array {
  const out = new Uint16Array(values.length);
  for (let i = 0; i < values.length; i++) out[i] = f32ToF16Bits(values[i]!);
  return out;
}

/** Largest finite FP8 E4M3 (fn) value. */
export const E4M3_MAX = 448;

/** FP8 E4M3 (fn: no infinities; 0x7f and 0xff are NaN) → value. */
export function e4m3ToF32(b: number): number {
  const sign = b & 0x80 ? -1 : 1;
  const e = (b >>> 3) & 0xf;
  const m = b & 7;
  if (e === 15 && m === 7) return Number.NaN;
  if (e === 0) return sign * m * 2 ** -9;
  return sign * (1 + m / 8) * 2 ** (e - 7);
}

function roundHalfEven(v: number): number {
  const f = Math.floor(v);
  const d = v - f;
  if (d > 0.5) return f + 1;
  if (d < 0.5) return f;
  return f % 2 === 0 ? f : f + 1;
}

/**
 * f32 → FP8 E4M3 (fn) code, rounding to nearest even and saturating to ±448, as CUDA's
 * `__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3)` and PyTorch's `.to(float8_e4m3fn)` of an
 * in-range value.
 */
export function f32ToE4m3(x: number): number {
  if (Number.isNaN(x)) return 0x7f;
  const sign = x < 0 || Object.is(x, -0) ? 0x80 : 0;
  const a = Math.abs(x);
  if (a >= E4M3_MAX) return sign | 0x7e;
  if (a < 2 ** -6) return sign | roundHalfEven(a * 2 ** 9); // subnormals m · 2^−9; m = 8 is 2^−6, the smallest normal
  let e = Math.floor(Math.log2(a));
  if (2 ** e > a) e--;
  else if (2 ** (e + 1) <= a) e++;
  let m = roundHalfEven((a / 2 ** e - 1) * 8);
  if (m === 8) {
    m = 0;
    e++;
  }
  if (e > 8 || (e === 8 && m > 6)) return sign | 0x7e;
  return sign | ((e + 7) << 3) | m;
}

/** The 256 E4M3 codes decoded once. */
export const E4M3_VALUES: Float32Array = Float32Array.from({ length: 256 }, (_, b) => e4m3ToF32(b));

/** An f32 value rounded to the element type's precision and back (what storing it does). */
export function roundTo(dtype: FloatDtype, x: number): number {
  if (dtype === 'f32') return Math.fround(x);
  if (dtype === 'bf16') return bf16BitsToF32(f32ToBf16Bits(x));
  return f16BitsToF32(f32ToF16Bits(x));
}
