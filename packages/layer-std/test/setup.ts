import { CpuBackend } from '@metrale/cpu-backend';
import {
  MemoryWeightSource, SeededRandom, StepDriver, floatBytes, roundTo, tensorOf,
  type FloatDtype, type HostTensor, type LayerLimits, type MetralePlugin, type Precision, type TransformerLayer,
} from '@metrale/core';
import { decodeRows, encodeRows } from '@metrale/core/testing';

export const LIMITS: LayerLimits = { maxSeqs: 3, maxSeqLen: 64, maxBatch: 2, maxK: 4, maxRows: 48 };

/** Random f32 tensors, remembered as f64 arrays for the references. */
export class Weights {
  readonly tensors: HostTensor[] = [];
  readonly values = new Map<string, Float64Array>();
  constructor(readonly rnd = new SeededRandom(3)) {}

  add(name: string, shape: number[], scale: number, offset = 0): Float64Array {
    const n = shape.reduce((a, b) => a * b, 1);
    const v = Float32Array.from({ length: n }, () => offset + scale * this.rnd.normal());
    this.tensors.push(tensorOf(name, v, shape));
    const d = Float64Array.from(v);
    this.values.set(name, d);
    return d;
  }

  source(origin = 'test weights'): MemoryWeightSource {
    return new MemoryWeightSource(origin, this.tensors);
  }
}

/** y = W x for W [out][in] (row-major), in f64. */
export function matvec(w: Float64Array, x: ArrayLike<number>, out: number, inp: number, xOff = 0): Float64Array {
  const y = new Float64Array(out);
  for (let o = 0; o < out; o++) {
    let s = 0;
    for (let i = 0; i < inp; i++) s += w[o * inp + i]! * x[xOff + i]!;
    y[o] = s;
  }
  return y;
}

export const silu = (x: number): number => x / (1 + Math.exp(-x));
export const sigmoid = (x: number): number => 1 / (1 + Math.exp(-x));

export function rmsNorm(x: ArrayLike<number>, w: ArrayLike<number>, eps: number, offset: number): Float64Array {
  let ss = 0;
  for (let i = 0; i < x.length; i++) ss += x[i]! * x[i]!;
  const inv = 1 / Math.sqrt(ss / x.length + eps);
  return Float64Array.from({ length: x.length }, (_, i) => x[i]! * inv * (offset + w[i]!));
}

/**
 * Relative L2 bounds of a layer's output in each row type against the float64 reference of the f32
 * path (its expected output): bf16 keeps 8 significant bits, so a few roundings of the rows and
 * weights on the way give a few 1e-3 (the precision tests print what they measure).
 */
export const ROW_TYPE_BOUND: Readonly<Record<FloatDtype, number>> = { f32: 1e-5, bf16: 1e-2, f16: 2e-3 };

// f32 values stored as a row type and read back: core's testing helpers, which the layer tests take from here.
export { encodeRows, decodeRows };

/** The values a layer of row type `dtype` reads for f32 input rows. */
export function asRows(values: Float32Array, dtype: FloatDtype): Float32Array {
  return dtype === 'f32' ? values : values.map((v) => roundTo(dtype, v));
}

/** Row types of a run: of the input rows, and of the output rows (an lm head writes f32 logits). */
export interface RowTypes {
  readonly rows?: FloatDtype;
  readonly out?: FloatDtype;
}

/**
 * One stateless layer on a CPU backend: rows in, rows out, through a one-layer driver (prefill).
 * `types` gives the layer's row type (the f32 input is stored in it) and its output's.
 */
export function runRows(make: (gpu: CpuBackend) => TransformerLayer, input: Float32Array, tokens?: Int32Array, rows?: number, types: RowTypes = {}): Float32Array {
  const gpu = new CpuBackend();
  const layer = make(gpu);
  const driver = new StepDriver({ gpu, layers: [layer], limits: LIMITS });
  const inType = types.rows ?? 'f32';
  try {
    const n = rows ?? input.length / (layer.inputRowBytes / floatBytes(inType));
    const seq = driver.open();
    const r = driver.prefill({ seqs: [seq], lengths: [n], ...(layer.inputRowBytes ? { input: encodeRows(input, inType) } : {}), ...(tokens ? { tokens } : {}) });
    return decodeRows(driver.readOutput(r), types.out ?? inType);
  } finally {
    driver.dispose();
    layer.dispose();
    gpu.dispose();
  }
}

/** The plugin, creating every layer in `precision` (the conformance kit creates layers without one). */
export function withPrecision(p: MetralePlugin, precision: Precision): MetralePlugin {
  return { ...p, create: (context) => p.create({ ...context, precision }) };
}
