import { FP8_BLOCK, dequantizeFp8, quantizeFp8 as quantizeBlockFp8, type HostTensor } from '@metrale/core';
import { Weights } from './setup.js';

// Block-FP8 weights made in the test, as Qwen3-Next-FP8 and GLM-5-FP8 ship them: E4M3 codes and
// one f32 `weight_scale_inv` per 128 × 128 block (the block's largest magnitude over 448), so that
// weight ≈ code value × scale.

export interface Fp8Matrix {
  readonly codes: Uint8Array;
  /** [⌈rows/128⌉][⌈cols/128⌉]. */
  readonly scales: Float32Array;
  /** code value × scale, the weight the FP8 path multiplies by. */
  readonly values: Float64Array;
}

/** A [rows, cols] matrix quantized to E4M3 with per-block scales (core's quantizer), and its dequantized values. */
export function quantizeFp8(values: ArrayLike<number>, rows: number, cols: number): Fp8Matrix {
  const { codes, scales } = quantizeBlockFp8(values, rows, cols);
  return { codes, scales, values: Float64Array.from(dequantizeFp8(codes, scales, rows, cols)) };
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
