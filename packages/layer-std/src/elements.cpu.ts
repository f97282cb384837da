import { E4M3_VALUES, FP8_BLOCK, FLOAT_DTYPE_CODE, floatBytes, readElements, rowDtypeOf, type DeviceMemoryView, type WeightDtype } from '@metrale/core';

// How the CPU twins read the expert weights of the kernels (kernels/std-common.cuh): of a weight type
// (a row type, or FP8 E4M3 codes with f32 128 × 128 block scales). Rows, caches and intermediates
// of a row type are read and written with core's row-element helpers (rowDtypeOf, elementReader, …).

/** The codes expert kernels take for their weights: FLOAT_DTYPE_CODE, and 3 for FP8 E4M3. */
export const WEIGHT_DTYPE_CODE: Readonly<Record<WeightDtype, number>> = { ...FLOAT_DTYPE_CODE, f8e4m3: 3 };

/** The weight type of a weight code; throws on any other code. */
export function weightDtypeOf(code: number): WeightDtype {
  return code === WEIGHT_DTYPE_CODE.f8e4m3 ? 'f8e4m3' : rowDtypeOf(code);
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
