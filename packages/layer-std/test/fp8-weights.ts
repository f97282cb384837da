import { E4M3_MAX, E4M3_VALUES, FP8_BLOCK, type HostTensor } from '@metrale/core';
import { Weights } from './setup.js';

// Block-FP8 weights made in the test, as Qwen3-Next-FP8 and GLM-5-FP8 ship them: E4M3 codes and
// one f32 `weight_scale_inv` per 128 × 128 block (the block's largest magnitude over 448), so that
// weight ≈ code value × scale.

/** The positive finite E4M3 values, ascending: codes 0x00 … 0x7e. */
const POSITIVE = E4M3_VALUES.subarray(0, 0x7f);

/** The E4M3 code nearest to x (ties to the even code), saturating at ±448. */
export function e4m3Code(x: number): number {
  const sign = x < 0 || Object.is(x, -0) ? 0x80 : 0;
  const a = Math.min(Math.abs(x), E4M3_MAX);
  let lo = 0;
  let hi = POSITIVE.length - 1;
  while (hi - lo > 1) {
    const mid = (lo + hi) >> 1;
    if (POSITIVE[mid]! <= a) lo = mid;
    else hi = mid;
  }
  const dl = a - POSITIVE[lo]!;
  const dh = POSITIVE[hi]! - a;
  const code = dl < dh || (dl === dh && lo % 2 === 0) ? lo : hi;
  return sign | code;
}

export interface Fp8Matrix {
  readonly codes: Uint8Array;
  /** [⌈rows/128⌉][⌈cols/128⌉]. */
  readonly scales: Float32Array;
  /** code value × scale, the weight the FP8 path multiplies by. */
  readonly values: Float64Array;
}

/** A [rows, cols] matrix quantized to E4M3 with per-block scales. */
export function quantizeFp8(values: ArrayLike<number>, rows: number, cols: number): Fp8Matrix {
  const bR = Math.ceil(rows / FP8_BLOCK);
  const bC = Math.ceil(cols / FP8_BLOCK);
  const scales = new Float32Array(bR * bC);
  for (let r = 0; r < rows; r++) {
    for (let c = 0; c < cols; c++) {
      const s = Math.floor(r / FP8_BLOCK) * bC + Math.floor(c / FP8_BLOCK);
      scales[s] = Math.max(scales[s]!, Math.abs(values[r * cols + c]!));
    }
  }
  for (let i = 0; i < scales.length; i++) scales[i] = scales[i]! > 0 ? scales[i]! / E4M3_MAX : 1;
  const codes = new Uint8Array(rows * cols);
  const out = new Float64Array(rows * cols);
  for (let r = 0; r < rows; r++) {
    for (let c = 0; c < cols; c++) {
      const s = scales[Math.floor(r / FP8_BLOCK) * bC + Math.floor(c / FP8_BLOCK)]!;
      const code = e4m3Code(values[r * cols + c]! / s);
      codes[r * cols + c] = code;
      out[r * cols + c] = E4M3_VALUES[code]! * s;
    }
  }
  return { codes, scales, values: out };
}

/**
 * A copy of `w` whose 2-D tensors chosen by `pick` are F8_E4M3 with their `<name>_scale_inv`, and
 * whose reference values are the dequantized weights.
 */
export function toFp8(w: Weights, pick: (name: string, shape: readonly number[]) => boolean): Weights {
  const out = new Weights(w.rnd);
  for (const t of w.tensors) {
    const values = w.values.get(t.name)!;
    if (t.shape.length !== 2 || !pick(t.name, t.shape)) {
      out.tensors.push(t);
      out.values.set(t.name, values);
      continue;
    }
    const [rows, cols] = t.shape as [number, number];
    const q = quantizeFp8(values, rows, cols);
    const codes: HostTensor = { name: t.name, dtype: 'f8e4m3', shape: t.shape, data: q.codes };
    const scales: HostTensor = {
      name: `${t.name}_scale_inv`, dtype: 'f32', shape: [Math.ceil(rows / FP8_BLOCK), Math.ceil(cols / FP8_BLOCK)], data: new Uint8Array(q.scales.buffer),
    };
    out.tensors.push(codes, scales);
    out.values.set(t.name, q.values);
  }
  return out;
}

/** Linear weights of a layer: the 2-D `.weight` tensors, but the router and shared-expert gates the FP8 checkpoints keep unquantized. */
export const linearWeights = (name: string): boolean => (name === 'weight' || name.endsWith('.weight')) && !/(^|\.)gate\.weight$|shared_expert_gate\.weight$/.test(name);
