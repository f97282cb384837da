import { readF32, readOptionalF32, type DevicePtr, type GpuBackend, type LayerLimits, type LayerState, type LayerStep, type WeightSource } from '@metrale/core';
import { requireKernels } from './require-kernels.js';
import { layerNormKernel, rowLaunch } from './rows-kernels.js';
import { StatelessLayer } from './stateless-layer.js';

export interface LayerNormOptions {
  readonly hidden: number;
  readonly eps: number;
}

/** torch.nn.LayerNorm over f32 rows: `weight`, and `bias` when the checkpoint has one. */
export class LayerNormLayer extends StatelessLayer {
  readonly type = 'layer-norm';
  readonly inputRowBytes: number;
  readonly outputRowBytes: number;
  readonly options: LayerNormOptions;
  readonly #weight: DevicePtr;
  readonly #bias: DevicePtr;

  constructor(gpu: GpuBackend, weights: WeightSource, limits: LayerLimits, options: LayerNormOptions) {
    requireKernels(gpu, 'layer-norm', [layerNormKernel]);
    super(gpu, limits);
    this.options = options;
    this.inputRowBytes = this.outputRowBytes = 4 * options.hidden;
    try {
      this.#weight = this.memory.upload(readF32(weights, 'weight', [options.hidden]));
      const bias = readOptionalF32(weights, 'bias', [options.hidden]);
      this.#bias = bias ? this.memory.upload(bias) : 0n;
    } catch (error) {
      this.memory.free();
      throw error;
    }
  }

  protected run(step: LayerStep<LayerState>): void {
    const { hidden, eps } = this.options;
    step.gpu.launch(layerNormKernel, rowLaunch(step.rows, hidden, step.stream), {
      input: step.input, output: step.output, weight: this.#weight, bias: this.#bias, rows: step.rows, hidden, eps,
    });
  }
}
