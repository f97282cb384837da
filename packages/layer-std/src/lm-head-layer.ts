import {
  InvalidArgumentError, floatBytes, readLinear, runLinear, uploadLinear, flatLaunch, type GpuBackend, type LayerLimits, type LayerState, type LayerStep, type LinearWeight, type Precision, type WeightSource,
} from '@metrale/core';
import { precisionOf } from './layer-precision.js';
import { requireKernels } from './require-kernels.js';
import { softcapKernel } from './rows-kernels.js';
import { StatelessLayer } from './stateless-layer.js';

export interface LmHeadOptions {
  readonly hidden: number;
  readonly vocab: number;
  /** Tensor name (default `weight`): `lm_head.weight`, or `model.embed_tokens.weight` for tied embeddings. */
  readonly tensor?: string;
  /** Final logit soft-capping: logits = cap · tanh(logits / cap) (Gemma's `final_logit_softcapping`); absent: none. */
  readonly softcap?: number;
  /** Rows in `precision.rows`, the weight in that type (or FP8 if the checkpoint has it so); default F32_PRECISION. */
  readonly precision?: Precision;
}

/**
 * Rows → logits: `x · Wᵀ` with W [vocab][hidden] (then soft-capped, with `softcap`); the last layer of a model. The logits are f32
 * whatever the row type (the sampler's softmax reads them): one GEMM of row-typed x and W with an
 * f32 output, accumulated in f32.
 */
export class LmHeadLayer extends StatelessLayer {
  readonly type = 'lm-head';
  readonly inputRowBytes: number;
  readonly outputRowBytes: number;
  readonly options: Omit<LmHeadOptions, 'precision'>;
  readonly precision: Precision;
  readonly #weight: LinearWeight;

  constructor(gpu: GpuBackend, weights: WeightSource, limits: LayerLimits, options: LmHeadOptions) {
    if (options.softcap !== undefined) {
      if (!(options.softcap > 0 && Number.isFinite(options.softcap))) throw new InvalidArgumentError(`lm-head: softcap must be a positive number, got ${options.softcap}`);
      requireKernels(gpu, 'lm-head', [softcapKernel]);
    }
    super(gpu, limits);
    const { precision, ...rest } = options;
    this.options = rest;
    this.precision = precisionOf(precision, 'lm-head');
    this.inputRowBytes = floatBytes(this.precision.rows) * options.hidden;
    this.outputRowBytes = 4 * options.vocab;
    try {
      const w = readLinear(weights, options.tensor ?? 'weight', [options.vocab, options.hidden], this.precision);
      this.#weight = uploadLinear(gpu, (bytes) => this.memory.alloc(bytes), w);
    } catch (error) {
      this.memory.free();
      throw error;
    }
  }

  protected run(step: LayerStep<LayerState>): void {
    runLinear(step.gpu, { m: step.rows, x: step.input, w: this.#weight, y: step.output, xDtype: this.precision.rows, yDtype: 'f32', stream: step.stream });
    const cap = this.options.softcap;
    if (cap !== undefined) {
      const count = step.rows * this.options.vocab;
      step.gpu.launch(softcapKernel, flatLaunch(count, step.stream), { x: step.output, count, cap });
    }
  }
}
