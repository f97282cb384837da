import {
  F32_PRECISION, FLOAT_DTYPE_CODE, floatBytes, readF32, readLinear, runLinear, uploadLinear,
  rowLaunch, type DevicePtr, type GpuBackend, type LayerLimits, type LayerState, type LayerStep, type LinearWeight, type Precision, type WeightSource,
} from '@metrale/core';
import { normAddKernel } from './gemma3n-kernels.js';
import { asRowValues, Gemma3nRowLayer, requireGemma3nKernels, rowTypeOf } from './gemma3n-stateless.js';

export interface LaurelOptions {
  readonly hidden: number;
  /** r: `laurel_rank`. */
  readonly rank: number;
  /** `rms_norm_eps` of `post_laurel_norm`. */
  readonly eps: number;
  readonly precision?: Precision;
}

/**
 * Laurel, Gemma 3n's learned augmented residual (`Gemma3nTextLaurelBlock`; tensors `laurel.`
 * removed): y = x + post_laurel_norm(linear_right(linear_left(x))), a rank-r bottleneck with a
 * plain-w RMSNorm, added to its own input.
 */
export class LaurelLayer extends Gemma3nRowLayer {
  readonly type = 'laurel';
  readonly options: LaurelOptions;
  readonly #left: LinearWeight;
  readonly #right: LinearWeight;
  readonly #norm: DevicePtr;
  readonly #r: DevicePtr;
  readonly #t: DevicePtr;

  constructor(gpu: GpuBackend, weights: WeightSource, limits: LayerLimits, options: LaurelOptions) {
    const rows = rowTypeOf(options.precision, 'laurel');
    requireGemma3nKernels(gpu, 'laurel', [normAddKernel]);
    super(gpu, limits, rows, options.hidden, options.hidden);
    this.options = options;
    const { hidden: H, rank: r } = options;
    const precision = options.precision ?? F32_PRECISION;
    const alloc = (b: number) => this.memory.alloc(b);
    const made = this.allocate(() => ({
      left: uploadLinear(gpu, alloc, readLinear(weights, 'linear_left.weight', [r, H], precision)),
      right: uploadLinear(gpu, alloc, readLinear(weights, 'linear_right.weight', [H, r], precision)),
      norm: this.memory.upload(asRowValues(readF32(weights, 'post_laurel_norm.weight', [H]), rows)),
      r: alloc(floatBytes(rows) * limits.maxRows * r),
      t: alloc(floatBytes(rows) * limits.maxRows * H),
    }));
    [this.#left, this.#right, this.#norm, this.#r, this.#t] = [made.left, made.right, made.norm, made.r, made.t];
  }

  protected run(step: LayerStep<LayerState>): void {
    const { gpu, stream, rows } = step;
    const H = this.options.hidden;
    runLinear(gpu, { m: rows, x: step.input, w: this.#left, y: this.#r, xDtype: this.rows, yDtype: this.rows, stream });
    runLinear(gpu, { m: rows, x: this.#r, w: this.#right, y: this.#t, xDtype: this.rows, yDtype: this.rows, stream });
    gpu.launch(normAddKernel, rowLaunch(rows, H, stream), {
      x: step.input, t: this.#t, weight: this.#norm, out: step.output, rows, hidden: H, eps: this.options.eps, dtype: FLOAT_DTYPE_CODE[this.rows],
    });
  }
}
