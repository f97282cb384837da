import {
  FLOAT_DTYPE_CODE, floatBytes, rowLaunch, type AddsResidual, type DevicePtr, type GpuBackend, type LayerLimits, type LayerState, type LayerStep, type Precision,
  type ResidualOperands, type WeightSource,
} from '@metrale/core';
import { precisionOf, readRowVector } from './layer-precision.js';
import { requireKernels } from './require-kernels.js';
import { addRmsNormKernel, rmsNormKernel } from './rows-kernels.js';
import { StatelessLayer } from './stateless-layer.js';

export interface RmsNormOptions {
  readonly hidden: number;
  readonly eps: number;
  /**
   * 0: y = w · x̂ (Llama, GLM, Qwen3-Next's gated norm); 1: y = (1 + w) · x̂ (Qwen3-Next's
   * `Qwen3NextRMSNorm`, Gemma), whose checkpoints store w centred on 0.
   */
  readonly offset: 0 | 1;
  /**
   * Whether x̂ is rounded to the row type before the weight, as Hugging Face's Llama-style norms do
   * (`w · x̂.to(dtype)`: Llama, GLM), or the product is f32 and rounded once (`Qwen3NextRMSNorm`,
   * `Gemma3nRMSNorm`: `(x̂ · w).type_as(x)`). Default: `offset === 0`. Nothing in f32.
   */
  readonly roundNormalized?: boolean;
  readonly tensor?: string;
  /** Rows in and out in `precision.rows` (default F32_PRECISION); the sums are f32. */
  readonly precision?: Precision;
}

/**
 * RMSNorm: x / sqrt(mean(x²) + eps), times w or 1 + w, in f32 and rounded as Hugging Face rounds in
 * the row type: `roundNormalized` (default with offset 0: `GlmMoeDsaRMSNorm`, Llama) rounds x̂
 * before the weight; without it (default with offset 1: `Qwen3NextRMSNorm`; the Gemma 3n adapter
 * turns it off for `Gemma3nRMSNorm`, offset 0) the product is f32 and rounded once. As the first
 * part of a decoder block's branch it also takes the residual add before it (`AddsResidual`:
 * `std.add_rms_norm`, one launch for the two).
 */
export class RmsNormLayer extends StatelessLayer implements AddsResidual {
  readonly type = 'rms-norm';
  readonly inputRowBytes: number;
  readonly outputRowBytes: number;
  readonly options: Required<Omit<RmsNormOptions, 'precision'>>;
  readonly precision: Precision;
  readonly #weight: DevicePtr;

  constructor(gpu: GpuBackend, weights: WeightSource, limits: LayerLimits, options: RmsNormOptions) {
    requireKernels(gpu, 'rms-norm', [rmsNormKernel, addRmsNormKernel]);
    super(gpu, limits);
    const { precision, ...rest } = options;
    this.options = { tensor: 'weight', ...rest, roundNormalized: rest.roundNormalized ?? rest.offset === 0 };
    this.precision = precisionOf(precision, 'rms-norm');
    this.inputRowBytes = this.outputRowBytes = floatBytes(this.precision.rows) * options.hidden;
    try {
      this.#weight = this.memory.upload(readRowVector(weights, this.options.tensor, options.hidden, this.precision.rows));
    } catch (error) {
      this.memory.free();
      throw error;
    }
  }

  protected run(step: LayerStep<LayerState>): void {
    step.gpu.launch(rmsNormKernel, rowLaunch(step.rows, this.options.hidden, step.stream), { input: step.input, output: step.output, ...this.#norm(step) });
  }

  forwardAdded(step: LayerStep<LayerState>, { a, b, sum }: ResidualOperands): void {
    this.checkStep(step);
    step.gpu.launch(addRmsNormKernel, rowLaunch(step.rows, this.options.hidden, step.stream), { a, b, sum, output: step.output, ...this.#norm(step) });
  }

  #norm(step: LayerStep<LayerState>) {
    const { hidden, eps, offset, roundNormalized } = this.options;
    return { weight: this.#weight, rows: step.rows, hidden, eps, offset, roundNormalized: roundNormalized ? 1 : 0, dtype: FLOAT_DTYPE_CODE[this.precision.rows] };
  }
}
