import { FLOAT_DTYPE_CODE, floatBytes, rowLaunch, type DevicePtr, type GpuBackend, type LayerLimits, type LayerState, type LayerStep, type Precision, type WeightSource } from '@metrale/core';
import { precisionOf, readRowVector } from './layer-precision.js';
import { requireKernels } from './require-kernels.js';
import { rmsNormKernel } from './rows-kernels.js';
import { StatelessLayer } from './stateless-layer.js';

export interface RmsNormOptions {
  readonly hidden: number;
  readonly eps: number;
  /**
   * 0: y = w · x̂ (Llama, GLM, Qwen3-Next's gated norm); 1: y = (1 + w) · x̂ (Qwen3-Next's
   * `Qwen3NextRMSNorm`, Gemma), whose checkpoints store w centred on 0.
   */
  readonly offset: 0 | 1;
  readonly tensor?: string;
  /** Rows in and out in `precision.rows` (default F32_PRECISION); the sums are f32. */
  readonly precision?: Precision;
}

/**
 * RMSNorm: x / sqrt(mean(x²) + eps), times w or 1 + w, in f32 and rounded as Hugging Face rounds in
 * the row type: offset 0 (`GlmMoeDsaRMSNorm`, Llama) rounds x̂ before the weight, offset 1
 * (`Qwen3NextRMSNorm`) multiplies in f32 and rounds once.
 */
export class RmsNormLayer extends StatelessLayer {
  readonly type = 'rms-norm';
  readonly inputRowBytes: number;
  readonly outputRowBytes: number;
  readonly options: Required<Omit<RmsNormOptions, 'precision'>>;
  readonly precision: Precision;
  readonly #weight: DevicePtr;

  constructor(gpu: GpuBackend, weights: WeightSource, limits: LayerLimits, options: RmsNormOptions) {
    requireKernels(gpu, 'rms-norm', [rmsNormKernel]);
    super(gpu, limits);
    const { precision, ...rest } = options;
    this.options = { tensor: 'weight', ...rest };
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
    const { hidden, eps, offset } = this.options;
    step.gpu.launch(rmsNormKernel, rowLaunch(step.rows, hidden, step.stream), {
      input: step.input, output: step.output, weight: this.#weight, rows: step.rows, hidden, eps, offset, dtype: FLOAT_DTYPE_CODE[this.precision.rows],
    });
  }
}
