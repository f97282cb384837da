import { floatBytes, type GpuBackend, type LayerLimits, type LayerState, type LayerStep, type Precision, type WeightSource } from '@metrale/core';
import { precisionOf } from './layer-precision.js';
import { requireKernels } from './require-kernels.js';
import { geluMulKernel, siluMulKernel } from './rows-kernels.js';
import { StatelessLayer } from './stateless-layer.js';
import { SwiGlu, type GateActivation } from './swiglu.js';

export interface MlpOptions {
  readonly hidden: number;
  /** `intermediate_size` (or the shared expert's size). */
  readonly inter: number;
  /** The gate's activation (default SiLU: SwiGLU); Gemma 3n: GELU-tanh, with activation sparsity on some layers. */
  readonly activation?: GateActivation;
  /** Rows, intermediates and weights in `precision.rows` (FP8 weights kept when `fp8Weights`); default F32_PRECISION. */
  readonly precision?: Precision;
}

/** The dense gated MLP (`gate_proj`, `up_proj`, `down_proj`): SwiGLU, or GELU-tanh with optional activation sparsity. */
export class MlpLayer extends StatelessLayer {
  readonly type = 'mlp';
  readonly inputRowBytes: number;
  readonly outputRowBytes: number;
  readonly options: Omit<MlpOptions, 'precision'>;
  readonly precision: Precision;
  readonly #mlp: SwiGlu;

  constructor(gpu: GpuBackend, weights: WeightSource, limits: LayerLimits, options: MlpOptions) {
    requireKernels(gpu, 'mlp', [options.activation?.kind === 'gelu_tanh' ? geluMulKernel : siluMulKernel]);
    super(gpu, limits);
    const { precision, ...rest } = options;
    this.options = rest;
    this.precision = precisionOf(precision, 'mlp');
    this.inputRowBytes = this.outputRowBytes = floatBytes(this.precision.rows) * options.hidden;
    try {
      this.#mlp = new SwiGlu(this.memory, weights, '', options.hidden, options.inter, limits.maxRows, this.precision, options.activation);
    } catch (error) {
      this.memory.free();
      throw error;
    }
  }

  protected run(step: LayerStep<LayerState>): void {
    this.#mlp.run(step.gpu, step.stream, step.input, step.output, step.rows);
  }
}
