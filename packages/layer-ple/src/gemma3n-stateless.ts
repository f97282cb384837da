import {
  F32_PRECISION, InvalidArgumentError, StatelessLayer, floatBytes, requireKernels, roundTo,
  type FloatDtype, type GpuBackend, type Kernel, type LayerLimits, type Precision,
} from '@metrale/core';

/**
 * Checks, before a layer allocates anything, that the backend can run the kernels it launches:
 * the CPU backend runs the twins; any other needs the package's fatbins (built with nvcc).
 */
export function requireGemma3nKernels(gpu: GpuBackend, layer: string, kernels: readonly Kernel<any>[]): void {
  requireKernels(gpu, '@metrale/layer-ple', layer, kernels);
}

/** The row type of a precision; Gemma 3n's layers (and 'ple') take f32, bf16 or f16 rows and no FP8 weights. */
export function rowTypeOf(precision: Precision | undefined, layer: string): FloatDtype {
  const p = precision ?? F32_PRECISION;
  if (p.rows !== 'f32' && p.rows !== 'bf16' && p.rows !== 'f16') throw new InvalidArgumentError(`${layer}: precision.rows must be f32, bf16 or f16, got ${String(p.rows)}`);
  if (p.fp8Weights) throw new InvalidArgumentError(`${layer}: FP8 weights are not supported for Gemma 3n's layers; load the checkpoint in bf16 (--dtype bf16) or f32`);
  return p.rows;
}

/** A small f32 vector holding row-type values (norm and router weights), as the model holds them. */
export function asRowValues(v: Float32Array, rows: FloatDtype): Float32Array {
  if (rows !== 'f32') for (let i = 0; i < v.length; i++) v[i] = roundTo(rows, v[i]!);
  return v;
}

/**
 * A Gemma 3n layer whose rows depend on nothing but themselves (AltUp's predict, correct, stream
 * init and unembedding, Laurel: core's `StatelessLayer`), with rows of `inWidth` and `outWidth`
 * values of the row type `rows`.
 */
export abstract class Gemma3nRowLayer extends StatelessLayer {
  readonly inputRowBytes: number;
  readonly outputRowBytes: number;
  readonly rows: FloatDtype;

  constructor(gpu: GpuBackend, limits: LayerLimits, rows: FloatDtype, inWidth: number, outWidth: number) {
    super(gpu, limits);
    this.rows = rows;
    this.inputRowBytes = floatBytes(rows) * inWidth;
    this.outputRowBytes = floatBytes(rows) * outWidth;
  }

  /** Makes the layer's device buffers; frees what it allocated when one fails. */
  protected allocate<T>(make: () => T): T {
    try {
      return make();
    } catch (error) {
      this.memory.free();
      throw error;
    }
  }
}
