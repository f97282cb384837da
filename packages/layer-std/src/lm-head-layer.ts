import { readF32, type DevicePtr, type GpuBackend, type LayerLimits, type LayerState, type LayerStep, type WeightSource } from '@metrale/core';
import { StatelessLayer } from './stateless-layer.js';

export interface LmHeadOptions {
  readonly hidden: number;
  readonly vocab: number;
  /** Tensor name (default `weight`): `lm_head.weight`, or `model.embed_tokens.weight` for tied embeddings. */
  readonly tensor?: string;
}

/** Rows → logits: `x · Wᵀ` with W [vocab][hidden]; the last layer of a model, f32 [vocab] rows out. */
export class LmHeadLayer extends StatelessLayer {
  readonly type = 'lm-head';
  readonly inputRowBytes: number;
  readonly outputRowBytes: number;
  readonly options: LmHeadOptions;
  readonly #weight: DevicePtr;

  constructor(gpu: GpuBackend, weights: WeightSource, limits: LayerLimits, options: LmHeadOptions) {
    super(gpu, limits);
    this.options = options;
    this.inputRowBytes = 4 * options.hidden;
    this.outputRowBytes = 4 * options.vocab;
    try {
      this.#weight = this.memory.upload(readF32(weights, options.tensor ?? 'weight', [options.vocab, options.hidden]));
    } catch (error) {
      this.memory.free();
      throw error;
    }
  }

  protected run(step: LayerStep<LayerState>): void {
    const { hidden, vocab } = this.options;
    step.gpu.gemm({ m: step.rows, n: vocab, k: hidden, a: step.input, b: this.#weight, c: step.output, transB: true, dtype: 'f32', stream: step.stream });
  }
}
