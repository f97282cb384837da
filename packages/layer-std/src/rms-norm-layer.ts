import { readF32, type DevicePtr, type GpuBackend, type LayerLimits, type LayerState, type LayerStep, type WeightSource } from '@metrale/core';
import { requireKernels } from './require-kernels.js';
import { rmsNormKernel, rowLaunch } from './rows-kernels.js';
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
}

/** RMSNorm over f32 rows: x / sqrt(mean(x²) + eps), times w or 1 + w. */
export class RmsNormLayer extends StatelessLayer {
  readonly type = 'rms-norm';
  readonly inputRowBytes: number;
  readonly outputRowBytes: number;
  readonly options: Required<RmsNormOptions>;
  readonly #weight: DevicePtr;

  constructor(gpu: GpuBackend, weights: WeightSource, limits: LayerLimits, options: RmsNormOptions) {
    requireKernels(gpu, 'rms-norm', [rmsNormKernel]);
    super(gpu, limits);
    this.options = { tensor: 'weight', ...options };
    this.inputRowBytes = this.outputRowBytes = 4 * options.hidden;
    try {
      this.#weight = this.memory.upload(readF32(weights, this.options.tensor, [options.hidden]));
    } catch (error) {
      this.memory.free();
      throw error;
    }
  }

  protected run(step: LayerStep<LayerState>): void {
    const { hidden, eps, offset } = this.options;
    step.gpu.launch(rmsNormKernel, rowLaunch(step.rows, hidden, step.stream), {
      input: step.input, output: step.output, weight: this.#weight, rows: step.rows, hidden, eps, offset,
    });
  }
}
