import { CpuBackend } from '@metrale/cpu-backend';
import { MemoryWeightSource, SeededRandom, StepDriver, tensorOf, type HostTensor, type LayerLimits, type TransformerLayer } from '@metrale/core';

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

/** ‖a − b‖ / ‖b‖. */
export function relErr(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let num = 0;
  let den = 0;
  for (let i = 0; i < b.length; i++) {
    num += (a[i]! - b[i]!) ** 2;
    den += b[i]! ** 2;
  }
  return Math.sqrt(num / den);
}

/** One stateless layer on a CPU backend: rows in, rows out, through a one-layer driver (prefill). */
export function runRows(make: (gpu: CpuBackend) => TransformerLayer, input: Float32Array, tokens?: Int32Array, rows?: number): Float32Array {
  const gpu = new CpuBackend();
  const layer = make(gpu);
  const driver = new StepDriver({ gpu, layers: [layer], limits: LIMITS });
  try {
    const n = rows ?? input.length / (layer.inputRowBytes / 4);
    const seq = driver.open();
    const r = driver.prefill({ seqs: [seq], lengths: [n], ...(layer.inputRowBytes ? { input } : {}), ...(tokens ? { tokens } : {}) });
    return driver.readOutputF32(r).slice();
  } finally {
    driver.dispose();
    layer.dispose();
    gpu.dispose();
  }
}
