import { InvalidArgumentError, f32ToBf16Bits, f32ToF16Bits, type DeviceMemoryView, type DevicePtr } from '@metrale/core';

// The gated-norm output y as the kernels store it (kernels/gdn-step.cuh store_y): in the row type
// the launch's `yDtype` names (FLOAT_DTYPE_CODE: 0 f32, 1 bf16, 2 f16), each value computed in
// f32 and rounded once, to nearest even, where it is stored.

/** `count` elements of y from element `first`: the twin writes `values`, then `store()` puts them in device memory. */
export interface OutputRows {
  readonly values: Float32Array;
  store(): void;
}

/** Throws unless `code` is a FLOAT_DTYPE_CODE (a kernel given another stores f32). */
export function checkYDtype(kernel: string, code: number): void {
  if (code !== 0 && code !== 1 && code !== 2) throw new InvalidArgumentError(`${kernel}: yDtype must be 0 (f32), 1 (bf16) or 2 (f16), got ${code}`);
}

/**
 * A view of y's elements [first, first + count) in element type `code`. f32: the device memory
 * itself (each value rounds to f32 as it is written, as before); bf16 / f16: an f32 staging array
 * whose values `store()` encodes into the 16-bit words.
 */
export function outputRows(mem: DeviceMemoryView, y: DevicePtr, first: number, count: number, code: number): OutputRows {
  if (code === 0) return { values: mem.f32(y + BigInt(4 * first), count), store: () => {} };
  const values = new Float32Array(count);
  const encode = code === 1 ? f32ToBf16Bits : f32ToF16Bits;
  return {
    values,
    store: () => {
      const words = mem.u16(y + BigInt(2 * first), count);
      for (let i = 0; i < count; i++) words[i] = encode(values[i]!);
    },
  };
}
