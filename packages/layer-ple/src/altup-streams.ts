import {
  F32_PRECISION, FLOAT_DTYPE_CODE, floatBytes, readLinear, runLinear, uploadLinear,
  type DevicePtr, type GpuBackend, type LayerLimits, type LayerState, type LayerStep, type LinearWeight, type Precision, type WeightSource,
} from '@metrale/core';
import { copyKernel, magnitudeKernel, rowLaunch, streamsMeanKernel } from './gemma3n-kernels.js';
import { Gemma3nRowLayer, requireGemma3nKernels, rowTypeOf } from './gemma3n-stateless.js';

export interface AltUpStreamsOptions {
  readonly hidden: number;
  /** n: `altup_num_inputs`. */
  readonly streams: number;
  readonly precision?: Precision;
}

/** The n − 1 projections `{name}.{0..n−2}.weight` [H, H] of the model (its prefix removed). */
function loadProjections(w: WeightSource, name: string, o: AltUpStreamsOptions, precision: Precision, alloc: (bytes: number) => DevicePtr, gpu: GpuBackend): LinearWeight[] {
  return Array.from({ length: o.streams - 1 }, (_, i) => uploadLinear(gpu, alloc, readLinear(w, `${name}.${i}.weight`, [o.hidden, o.hidden], precision)));
}

/**
 * The AltUp streams from the scaled embedding x0 (`Gemma3nTextModel.forward`): rows of H in, n·H
 * out; s0 = x0 and s_i = altup_projections.(i−1)(x0), rescaled to x0's RMS (no ε).
 */
export class AltUpStreamsIn extends Gemma3nRowLayer {
  readonly type = 'altup-streams-in';
  readonly options: AltUpStreamsOptions;
  readonly #proj: LinearWeight[];
  /** [maxRows][H]: one projection's output before its rescale. */
  readonly #y: DevicePtr;

  constructor(gpu: GpuBackend, weights: WeightSource, limits: LayerLimits, options: AltUpStreamsOptions) {
    const rows = rowTypeOf(options.precision, 'altup-streams-in');
    requireGemma3nKernels(gpu, 'altup-streams-in', [copyKernel, magnitudeKernel]);
    super(gpu, limits, rows, options.hidden, options.streams * options.hidden);
    this.options = options;
    try {
      this.#proj = loadProjections(weights, 'altup_projections', options, options.precision ?? F32_PRECISION, (b) => this.memory.alloc(b), gpu);
      this.#y = this.memory.alloc(floatBytes(rows) * limits.maxRows * options.hidden);
    } catch (error) {
      this.memory.free();
      throw error;
    }
  }

  protected run(step: LayerStep<LayerState>): void {
    const { hidden: H, streams: n } = this.options;
    const { gpu, stream, rows } = step;
    const dtype = FLOAT_DTYPE_CODE[this.rows];
    gpu.launch(copyKernel, rowLaunch(rows, H, stream), {
      src: step.input, srcStride: H, dst: step.output, dstStride: n * H, scale: 0n, rows, hidden: H, srcDtype: dtype, dstDtype: dtype,
    });
    this.#proj.forEach((w, i) => {
      runLinear(gpu, { m: rows, x: step.input, w, y: this.#y, xDtype: this.rows, yDtype: this.rows, stream });
      const out = step.output + BigInt((i + 1) * H * floatBytes(this.rows));
      gpu.launch(magnitudeKernel, rowLaunch(rows, H, stream), { target: step.input, targetStride: H, y: this.#y, out, outStride: n * H, rows, hidden: H, dtype });
    });
  }
}

/**
 * The AltUp streams back to one row before the final norm: rows of n·H in, H out;
 * u_i = altup_unembed_projections.(i−1)(s_i) rescaled to s0's RMS (no ε), then the mean of s0, u_1 … u_{n−1}.
 */
export class AltUpStreamsOut extends Gemma3nRowLayer {
  readonly type = 'altup-streams-out';
  readonly options: AltUpStreamsOptions;
  readonly #proj: LinearWeight[];
  readonly #y: DevicePtr;
  /** [maxRows][n][H]: s0 and the rescaled u_i. */
  readonly #u: DevicePtr;

  constructor(gpu: GpuBackend, weights: WeightSource, limits: LayerLimits, options: AltUpStreamsOptions) {
    const rows = rowTypeOf(options.precision, 'altup-streams-out');
    requireGemma3nKernels(gpu, 'altup-streams-out', [copyKernel, magnitudeKernel, streamsMeanKernel]);
    super(gpu, limits, rows, options.streams * options.hidden, options.hidden);
    this.options = options;
    try {
      this.#proj = loadProjections(weights, 'altup_unembed_projections', options, options.precision ?? F32_PRECISION, (b) => this.memory.alloc(b), gpu);
      this.#y = this.memory.alloc(floatBytes(rows) * limits.maxRows * options.hidden);
      this.#u = this.memory.alloc(floatBytes(rows) * limits.maxRows * options.streams * options.hidden);
    } catch (error) {
      this.memory.free();
      throw error;
    }
  }

  protected run(step: LayerStep<LayerState>): void {
    const { hidden: H, streams: n } = this.options;
    const { gpu, stream, rows } = step;
    const dtype = FLOAT_DTYPE_CODE[this.rows];
    const bytes = floatBytes(this.rows);
    gpu.launch(copyKernel, rowLaunch(rows, H, stream), {
      src: step.input, srcStride: n * H, dst: this.#u, dstStride: n * H, scale: 0n, rows, hidden: H, srcDtype: dtype, dstDtype: dtype,
    });
    this.#proj.forEach((w, i) => {
      const at = BigInt((i + 1) * H * bytes);
      runLinear(gpu, { m: rows, x: step.input + at, ldx: n * H, w, y: this.#y, xDtype: this.rows, yDtype: this.rows, stream });
      gpu.launch(magnitudeKernel, rowLaunch(rows, H, stream), { target: step.input, targetStride: n * H, y: this.#y, out: this.#u + at, outStride: n * H, rows, hidden: H, dtype });
    });
    gpu.launch(streamsMeanKernel, rowLaunch(rows, H, stream), { streams: this.#u, out: step.output, rows, hidden: H, n, dtype });
  }
}
