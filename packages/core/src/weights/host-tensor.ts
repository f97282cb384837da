import { bf16BitsToF32, DTYPE_BYTES, E4M3_VALUES, f16BitsToF32, type DType } from '../device/dtype.js';
import { WeightsError } from '../errors.js';

/** A tensor in host memory: raw little-endian bytes with their type and shape. */
export interface HostTensor {
  readonly name: string;
  readonly dtype: DType;
  readonly shape: readonly number[];
  readonly data: Uint8Array;
}

export function elementCount(shape: readonly number[]): number {
  return shape.reduce((a, b) => a * b, 1);
}

/** Throws naming the tensor and its origin unless its shape is exactly `shape`. */
export function expectShape(tensor: HostTensor, shape: readonly number[], origin?: string): void {
  const same = tensor.shape.length === shape.length && tensor.shape.every((d, i) => d === shape[i]);
  if (!same) {
    throw new WeightsError(`tensor '${tensor.name}' has shape [${tensor.shape.join(', ')}], expected [${shape.join(', ')}]`, origin);
  }
}

function aligned<T extends ArrayBufferView>(data: Uint8Array, bytesPer: number, make: (b: ArrayBuffer, o: number, n: number) => T): T {
  const n = data.byteLength / bytesPer;
  if (data.byteOffset % bytesPer === 0) return make(data.buffer as ArrayBuffer, data.byteOffset, n);
  const copy = data.slice();
  return make(copy.buffer as ArrayBuffer, 0, n);
}

/** The tensor's values as f32, converting from any floating or integer type. */
export function toF32(tensor: HostTensor): Float32Array {
  const { data, dtype } = tensor;
  const n = data.byteLength / DTYPE_BYTES[dtype];
  const out = new Float32Array(n);
  switch (dtype) {
    case 'f32':
      out.set(aligned(data, 4, (b, o, c) => new Float32Array(b, o, c)));
      return out;
    case 'f64':
      out.set(aligned(data, 8, (b, o, c) => new Float64Array(b, o, c)));
      return out;
    case 'bf16': {
      const u = aligned(data, 2, (b, o, c) => new Uint16Array(b, o, c));
      for (let i = 0; i < n; i++) out[i] = bf16BitsToF32(u[i]!);
      return out;
    }
    case 'f16': {
      const u = aligned(data, 2, (b, o, c) => new Uint16Array(b, o, c));
      for (let i = 0; i < n; i++) out[i] = f16BitsToF32(u[i]!);
      return out;
    }
    case 'f8e4m3':
      // The codes' values; a block-scaled weight still needs its scales (readLinear applies them).
      for (let i = 0; i < n; i++) out[i] = E4M3_VALUES[data[i]!]!;
      return out;
    case 'i32':
      out.set(aligned(data, 4, (b, o, c) => new Int32Array(b, o, c)));
      return out;
    case 'u32':
      out.set(aligned(data, 4, (b, o, c) => new Uint32Array(b, o, c)));
      return out;
    case 'i64': {
      const v = aligned(data, 8, (b, o, c) => new BigInt64Array(b, o, c));
      for (let i = 0; i < n; i++) out[i] = Number(v[i]!);
      return out;
    }
    case 'i16':
      out.set(aligned(data, 2, (b, o, c) => new Int16Array(b, o, c)));
      return out;
    case 'u16':
      out.set(aligned(data, 2, (b, o, c) => new Uint16Array(b, o, c)));
      return out;
    case 'i8':
      out.set(new Int8Array(data.buffer, data.byteOffset, n));
      return out;
    case 'u8':
    case 'bool':
      out.set(data);
      return out;
  }
}

/** The tensor's values as i32 (token ids, counts); throws for floating types. */
export function toI32(tensor: HostTensor, origin?: string): Int32Array {
  if (tensor.dtype === 'i32') return aligned(tensor.data, 4, (b, o, c) => new Int32Array(b, o, c)).slice();
  if (tensor.dtype === 'i64') {
    const v = aligned(tensor.data, 8, (b, o, c) => new BigInt64Array(b, o, c));
    return Int32Array.from(v, (x) => Number(x));
  }
  throw new WeightsError(`tensor '${tensor.name}' is ${tensor.dtype}, expected an integer type (i32 or i64)`, origin);
}
