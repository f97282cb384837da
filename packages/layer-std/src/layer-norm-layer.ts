import { FLOAT_DTYPE_CODE, floatBytes, rowLaunch, type DevicePtr, type GpuBackend, type LayerLimits, type LayerState, type LayerStep, type Precision, type WeightSource } from '@metrale/core';
import { precisionOf, readOptionalRowVector, readRowVector } from './layer-precision.js';
import { requireKernels } from './require-kernels.js';
import { layerNormKernel } from './rows-kernels.js';
import { StatelessLayer } from './stateless-layer.js';

export interface LayerNormOptions {
  readonly hidden: number;
  readonly eps: number;
  /** Rows in and out in `precision.rows` (default F32_PRECISION); mean and variance are f32. */
  readonly precision?: Precision;
}

/** torch.nn.LayerNorm: `weight`, and `bias` when the checkpoint has one; f32 inside, one rounding to the row type. */
export class LayerNormLayer extends StatelessLayer {
  readonly type = 'layer-norm';
  readonly inputRowBytes: number;
  readonly outputRowBytes: number;
  readonly options: Omit<LayerNormOptions, 'precision'>;
  readonly precision: Precision;
  readonly #weight: DevicePtr;
  readonly #bias: DevicePtr;

  constructor(gpu: GpuBackend, weights: WeightSource, limits: LayerLimits, options: LayerNormOptions) {
    requireKernels(gpu, 'layer-norm', [layerNormKernel]);
    super(gpu, limits);
    const { precision, ...rest } = options;
    this.options = rest;
    this.precision = precisionOf(precision, 'layer-norm');
    const rows = this.precision.rows;
    this.inputRowBytes = this.outputRowBytes = floatBytes(rows) * options.hidden;
    try {
      this.#weight = this.memory.upload(readRowVector(weights, 'weight', options.hidden, rows));
      const bias = readOptionalRowVector(weights, 'bias', options.hidden, rows);
      this.#bias = bias ? this.memory.upload(bias) : 0n;
    } catch (error) {
      this.memory.free();
      throw error;
    }
  }

  protected run(step: LayerStep<LayerState>): void {
    const { hidden, eps } = this.options;
    step.gpu.launch(layerNormKernel, rowLaunch(step.rows, hidden, step.stream), {
      input: step.input, output: step.output, weight: this.#weight, bias: this.#bias, rows: step.rows, hidden, eps, dtype: FLOAT_DTYPE_CODE[this.precision.rows],
    });
  }
}
