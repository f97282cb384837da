import {
  F32_PRECISION, FLOAT_DTYPE_CODE, floatBytes, readLinear, runLinear, uploadLinear,
  rowLaunch, type DevicePtr, type GpuBackend, type Kernel, type LayerLimits, type LayerState, type LayerStep, type LinearWeight, type Precision, type WeightSource,
} from '@metrale/core';
import { magnitudeKernel, streamsMeanKernel } from './altup-kernels.js';
import { copyKernel } from './gemma3n-kernels.js';
import { Gemma3nRowLayer, requireGemma3nKernels, rowTypeOf } from './gemma3n-stateless.js';

export interface AltUpStreamsOptions {
  readonly hidden: number;
  /** n: `altup_num_inputs`. */
  readonly streams: number;
  readonly precision?: Precision;
}

/**
 * The model-level AltUp layers (`Gemma3nTextModel.forward`): n − 1 projections `{name}.{0..n−2}.weight`
 * [H, H] of the model (its prefix removed), each followed by a rescale to stream 0's RMS (no ε), and
 * `extra` row-type values per row of scratch besides the projection's own [maxRows][H].
 */
abstract class AltUpProjections extends Gemma3nRowLayer {
  readonly options: AltUpStreamsOptions;
  protected readonly proj: LinearWeight[];
  /** [maxRows][H]: one projection's output before its rescale. */
  protected readonly y: DevicePtr;
  /** [maxRows][extra], or 0n. */
  protected readonly extra: DevicePtr;

  constructor(gpu: GpuBackend, weights: WeightSource, limits: LayerLimits, options: AltUpStreamsOptions, own: { type: string; name: string; inStreams: number; outStreams: number; kernels: Kernel<any>[]; extra: number }) {
    const rows = rowTypeOf(options.precision, own.type);
    requireGemma3nKernels(gpu, own.type, own.kernels);
    const { hidden: H, streams: n } = options;
    super(gpu, limits, rows, own.inStreams * H, own.outStreams * H);
    this.options = options;
    const precision = options.precision ?? F32_PRECISION;
    const alloc = (bytes: number) => this.memory.alloc(bytes);
    const made = this.allocate(() => ({
      proj: Array.from({ length: n - 1 }, (_, i) => uploadLinear(gpu, alloc, readLinear(weights, `${own.name}.${i}.weight`, [H, H], precision))),
      y: alloc(floatBytes(rows) * limits.maxRows * H),
      extra: own.extra ? alloc(floatBytes(rows) * limits.maxRows * own.extra) : 0n,
    }));
    this.proj = made.proj;
    this.y = made.y;
    this.extra = made.extra;
  }

  /** Stream i + 1's projection of the rows at `x` (row stride `ldx`), rescaled to the rows at `target` (stride `targetStride`), into `out` (stride n·H). */
  protected project(step: LayerStep<LayerState>, i: number, x: DevicePtr, ldx: number, target: DevicePtr, targetStride: number, out: DevicePtr): void {
    const { hidden: H, streams: n } = this.options;
    const { gpu, stream, rows } = step;
    runLinear(gpu, { m: rows, x, ...(ldx !== H ? { ldx } : {}), w: this.proj[i]!, y: this.y, xDtype: this.rows, yDtype: this.rows, stream });
    gpu.launch(magnitudeKernel, rowLaunch(rows, H, stream), { target, targetStride, y: this.y, out, outStride: n * H, rows, hidden: H, dtype: FLOAT_DTYPE_CODE[this.rows] });
  }

  /** Copies the H values of each row at `src` (stride `srcStride`) to `dst` (stride n·H). */
  protected copyStream(step: LayerStep<LayerState>, src: DevicePtr, srcStride: number, dst: DevicePtr): void {
    const { hidden: H, streams: n } = this.options;
    const dtype = FLOAT_DTYPE_CODE[this.rows];
    step.gpu.launch(copyKernel, rowLaunch(step.rows, H, step.stream), {
      src, srcStride, dst, dstStride: n * H, scale: 0n, rows: step.rows, hidden: H, srcDtype: dtype, dstDtype: dtype,
    });
  }
}

/**
 * The AltUp streams from the scaled embedding x0 (`Gemma3nTextModel.forward`): rows of H in, n·H
 * out; s0 = x0 and s_i = altup_projections.(i−1)(x0), rescaled to x0's RMS (no ε).
 */
export class AltUpStreamsIn extends AltUpProjections {
  readonly type = 'altup-streams-in';

  constructor(gpu: GpuBackend, weights: WeightSource, limits: LayerLimits, options: AltUpStreamsOptions) {
    super(gpu, weights, limits, options, {
      type: 'altup-streams-in', name: 'altup_projections', inStreams: 1, outStreams: options.streams, kernels: [copyKernel, magnitudeKernel], extra: 0,
    });
  }

  protected run(step: LayerStep<LayerState>): void {
    const H = this.options.hidden;
    this.copyStream(step, step.input, H, step.output);
    this.proj.forEach((_, i) => this.project(step, i, step.input, H, step.input, H, step.output + BigInt((i + 1) * H * floatBytes(this.rows))));
  }
}

/**
 * The AltUp streams back to one row before the final norm: rows of n·H in, H out;
 * u_i = altup_unembed_projections.(i−1)(s_i) rescaled to s0's RMS (no ε), then the mean of s0, u_1 … u_{n−1}.
 */
export class AltUpStreamsOut extends AltUpProjections {
  readonly type = 'altup-streams-out';

  constructor(gpu: GpuBackend, weights: WeightSource, limits: LayerLimits, options: AltUpStreamsOptions) {
    // Scratch [maxRows][n][H]: s0 and the rescaled u_i.
    super(gpu, weights, limits, options, {
      type: 'altup-streams-out', name: 'altup_unembed_projections', inStreams: options.streams, outStreams: 1,
      kernels: [copyKernel, magnitudeKernel, streamsMeanKernel], extra: options.streams * options.hidden,
    });
  }

  protected run(step: LayerStep<LayerState>): void {
    const { hidden: H, streams: n } = this.options;
    const u = this.extra;
    this.copyStream(step, step.input, n * H, u);
    this.proj.forEach((_, i) => {
      const at = BigInt((i + 1) * H * floatBytes(this.rows));
      this.project(step, i, step.input + at, n * H, step.input, n * H, u + at);
    });
    step.gpu.launch(streamsMeanKernel, rowLaunch(step.rows, H, step.stream), { streams: u, out: step.output, rows: step.rows, hidden: H, n, dtype: FLOAT_DTYPE_CODE[this.rows] });
  }
}
