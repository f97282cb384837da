import { existsSync } from 'node:fs';
import {
  F32_PRECISION, InvalidArgumentError, PluginError, floatBytes, roundTo,
  type DevicePtr, type FloatDtype, type GpuBackend, type Kernel, type LayerLimits, type LayerState, type LayerStep, type Precision, type TransformerLayer,
} from '@metrale/core';
import { GEMMA3N_KERNELS } from './gemma3n-kernels.js';

/**
 * Checks, before a layer allocates anything, that the backend can run the Gemma 3n kernels: the
 * CPU backend runs the twins; any other needs the package's fatbin.
 */
export function requireGemma3nKernels(gpu: GpuBackend, layer: string, kernels: readonly Kernel<any>[] = GEMMA3N_KERNELS): void {
  if (gpu.kind === 'cpu') return;
  const missing = kernels.filter((k) => !k.cuda || !existsSync(k.cuda.module.fatbin));
  if (missing.length === 0) return;
  throw new PluginError(
    '@metrale/layer-ple',
    `the ${layer} layer has no ${gpu.kind} kernels in this build (${missing.map((k) => k.name).join(', ')}); run it on the CPU backend (--backend cpu) or build the package's kernels with nvcc`,
  );
}

/** The row type of a precision; Gemma 3n's layers take f32, bf16 or f16 rows and no FP8 weights. */
export function rowTypeOf(precision: Precision | undefined, layer: string): FloatDtype {
  const p = precision ?? F32_PRECISION;
  if (p.fp8Weights) throw new InvalidArgumentError(`${layer}: FP8 weights are not supported for Gemma 3n's layers; load the checkpoint in bf16 (--dtype bf16) or f32`);
  return p.rows;
}

/** A small f32 vector holding row-type values (norm and router weights), as the model holds them. */
export function asRowValues(v: Float32Array, rows: FloatDtype): Float32Array {
  if (rows !== 'f32') for (let i = 0; i < v.length; i++) v[i] = roundTo(rows, v[i]!);
  return v;
}

/** A layer's device allocations, freed together. */
export class Allocations {
  readonly #ptrs: DevicePtr[] = [];
  constructor(readonly gpu: GpuBackend) {}
  alloc(bytes: number): DevicePtr {
    const p = this.gpu.alloc(Math.max(4, bytes));
    this.#ptrs.push(p);
    return p;
  }
  upload(data: ArrayBufferView): DevicePtr {
    const p = this.alloc(data.byteLength);
    this.gpu.upload(p, data);
    return p;
  }
  free(): void {
    for (const p of this.#ptrs.splice(0)) this.gpu.free(p);
  }
}

/**
 * A Gemma 3n layer whose rows depend on nothing but themselves (AltUp's predict, correct, stream
 * init and unembedding, Laurel): no per-sequence state, every hook at its default, so verify rows
 * leave no trace and a sequence may start at a cached prefix.
 */
export abstract class Gemma3nRowLayer implements TransformerLayer<LayerState> {
  abstract readonly type: string;
  readonly inputRowBytes: number;
  readonly outputRowBytes: number;
  readonly rows: FloatDtype;
  protected readonly memory: Allocations;
  #disposed = false;

  constructor(protected readonly gpu: GpuBackend, readonly limits: LayerLimits, rows: FloatDtype, inWidth: number, outWidth: number) {
    this.rows = rows;
    this.inputRowBytes = floatBytes(rows) * inWidth;
    this.outputRowBytes = floatBytes(rows) * outWidth;
    this.memory = new Allocations(gpu);
  }

  openState(slot: number): LayerState {
    return { slot };
  }

  closeState(_state: LayerState): void {}

  resumeAt(_state: LayerState, _length: number): void {}

  forward(step: LayerStep<LayerState>): void {
    if (this.#disposed) throw new InvalidArgumentError(`${this.type}: forward on a disposed layer`);
    if (step.rows > this.limits.maxRows) throw new InvalidArgumentError(`${this.type}: a step of ${step.rows} rows exceeds limits.maxRows (${this.limits.maxRows})`);
    this.run(step);
  }

  protected abstract run(step: LayerStep<LayerState>): void;

  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    this.memory.free();
  }
}
