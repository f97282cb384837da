import type { GpuBackend, LayerLimits, LayerState, LayerStep, WeightSource } from '@metrale/core';
import { requireKernels } from './require-kernels.js';
import { siluMulKernel } from './rows-kernels.js';
import { StatelessLayer } from './stateless-layer.js';
import { SwiGlu } from './swiglu.js';

export interface MlpOptions {
  readonly hidden: number;
  /** `intermediate_size` (or the shared expert's size). */
  readonly inter: number;
}

/** The dense SwiGLU MLP (`gate_proj`, `up_proj`, `down_proj`; SiLU). */
export class MlpLayer extends StatelessLayer {
  readonly type = 'mlp';
  readonly inputRowBytes: number;
  readonly outputRowBytes: number;
  readonly options: MlpOptions;
  readonly #mlp: SwiGlu;

  constructor(gpu: GpuBackend, weights: WeightSource, limits: LayerLimits, options: MlpOptions) {
    requireKernels(gpu, 'mlp', [siluMulKernel]);
    super(gpu, limits);
    this.options = options;
    this.inputRowBytes = this.outputRowBytes = 4 * options.hidden;
    try {
      this.#mlp = new SwiGlu(this.memory, weights, '', options.hidden, options.inter, limits.maxRows);
    } catch (error) {
      this.memory.free();
      throw error;
    }
  }

  protected run(step: LayerStep<LayerState>): void {
    this.#mlp.run(step.gpu, step.stream, step.input, step.output, step.rows);
  }
}
