import { readF32, type DevicePtr, type GpuBackend, type LayerLimits, type LayerState, type LayerStep, type WeightSource } from '@metrale/core';
import { requireKernels } from './require-kernels.js';
import { embedKernel, rowLaunch } from './rows-kernels.js';
import { StatelessLayer } from './stateless-layer.js';

export interface EmbeddingOptions {
  readonly vocab: number;
  readonly hidden: number;
  /** Rows are multiplied by this (Gemma: sqrt(hidden), rounded as the model's dtype rounds it); default 1. */
  readonly scale?: number;
  /** Tensor name of the table (default `weight`, as in `embed_tokens.weight` with its prefix removed). */
  readonly tensor?: string;
}

/**
 * Token ids → rows: the first layer of a model. It reads the step's device token table, so it has
 * no input rows (`inputRowBytes` 0) and works unchanged under graph replay.
 */
export class EmbeddingLayer extends StatelessLayer {
  readonly type = 'embedding';
  readonly inputRowBytes = 0;
  readonly outputRowBytes: number;
  readonly options: Required<EmbeddingOptions>;
  readonly #table: DevicePtr;

  constructor(gpu: GpuBackend, weights: WeightSource, limits: LayerLimits, options: EmbeddingOptions) {
    requireKernels(gpu, 'embedding', [embedKernel]);
    super(gpu, limits);
    this.options = { scale: 1, tensor: 'weight', ...options };
    this.outputRowBytes = 4 * options.hidden;
    try {
      this.#table = this.memory.upload(readF32(weights, this.options.tensor, [options.vocab, options.hidden]));
    } catch (error) {
      this.memory.free();
      throw error;
    }
  }

  protected run(step: LayerStep<LayerState>): void {
    const { vocab, hidden, scale } = this.options;
    step.gpu.launch(embedKernel, rowLaunch(step.rows, hidden, step.stream), {
      tokens: step.tables.tokens, table: this.#table, out: step.output, rows: step.rows, hidden, vocab, scale,
    });
  }
}
