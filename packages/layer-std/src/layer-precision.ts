import { F32_PRECISION, InvalidArgumentError, readF32, readOptionalF32, roundTo, type FloatDtype, type Precision, type WeightSource } from '@metrale/core';

/** The precision a layer was given, or the f32 reference path. */
export function precisionOf(precision: Precision | undefined, layer: string): Precision {
  const p = precision ?? F32_PRECISION;
  if (p.rows !== 'f32' && p.rows !== 'bf16' && p.rows !== 'f16') throw new InvalidArgumentError(`${layer}: precision.rows must be f32, bf16 or f16, got ${String(p.rows)}`);
  // FP8 weights multiply bf16 / f16 rows (runLinear, the expert kernels); f32 rows take them dequantized.
  if (p.fp8Weights && p.rows === 'f32') {
    throw new InvalidArgumentError(`${layer}: FP8 weights need bf16 or f16 rows; use precision { rows: 'bf16', fp8Weights: true }, or fp8Weights: false to dequantize them for f32 rows`);
  }
  return p;
}

/**
 * A small f32 vector a kernel reads as is (norm weights and biases): its values rounded to the row
 * type, as the model holds its parameters in that type (Hugging Face's `weight.float()` of a bf16
 * parameter); the f32 path reads it unchanged.
 */
export function readRowVector(weights: WeightSource, name: string, length: number, rows: FloatDtype): Float32Array {
  return toRowValues(readF32(weights, name, [length]), rows);
}

/** `readRowVector` for a tensor that may be absent. */
export function readOptionalRowVector(weights: WeightSource, name: string, length: number, rows: FloatDtype): Float32Array | undefined {
  const v = readOptionalF32(weights, name, [length]);
  return v && toRowValues(v, rows);
}

function toRowValues(v: Float32Array, rows: FloatDtype): Float32Array {
  if (rows !== 'f32') for (let i = 0; i < v.length; i++) v[i] = roundTo(rows, v[i]!);
  return v;
}
