/** Element types a tensor or kernel buffer can hold, with their sizes in bytes. */
export type DType = 'f64' | 'f32' | 'bf16' | 'f16' | 'i64' | 'i32' | 'u32' | 'i16' | 'u16' | 'i8' | 'u8' | 'bool';

export const DTYPE_BYTES: Readonly<Record<DType, number>> = {
  f64: 8, f32: 4, bf16: 2, f16: 2, i64: 8, i32: 4, u32: 4, i16: 2, u16: 2, i8: 1, u8: 1, bool: 1,
};

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

/** Decodes bf16 bits into f32. */
export function fromBf16(bits: ArrayLike<number>): Float32Array {
  const out = new Float32Array(bits.length);
  for (let i = 0; i < bits.length; i++) out[i] = bf16BitsToF32(bits[i]!);
  return out;
}
