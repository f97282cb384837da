import { FLOAT_DTYPE_CODE, floatBytes, readFloats, rowLaunch, type DevicePtr, type GpuBackend, type LayerLimits, type LayerState, type LayerStep, type Precision, type WeightSource } from '@metrale/core';
import { precisionOf } from './layer-precision.js';
import { requireKernels } from './require-kernels.js';
import { embedKernel } from './rows-kernels.js';
import { StatelessLayer } from './stateless-layer.js';

export interface EmbeddingOptions {
  readonly vocab: number;
  readonly hidden: number;
  /**
   * Rows are multiplied by this (Gemma: sqrt(hidden), rounded as the model's dtype rounds it); default
   * 1. The product is f32, rounded once to the row type, as Hugging Face multiplies in the model's dtype.
   */
  readonly scale?: number;
  /** Tensor name of the table (default `weight`, as in `embed_tokens.weight` with its prefix removed). */
  readonly tensor?: string;
  /** The table and the rows out in `precision.rows` (default F32_PRECISION). */
  readonly precision?: Precision;
}

/**
 * Token ids → rows: the first layer of a model. It reads the step's device token table, so it has
 * no input rows (`inputRowBytes` 0) and works unchanged under graph replay. The table is held in the
 * row type (checkpoints never quantize it).
 */
export class EmbeddingLayer extends StatelessLayer {
  readonly type = 'embedding';
  readonly inputRowBytes = 0;
  readonly outputRowBytes: number;
  readonly options: Required<Omit<EmbeddingOptions, 'precision'>>;
  readonly precision: Precision;
  readonly #table: DevicePtr;

  constructor(gpu: GpuBackend, weights: WeightSource, limits: LayerLimits, options: EmbeddingOptions) {
    requireKernels(gpu, 'embedding', [embedKernel]);
    super(gpu, limits);
    const { precision, ...rest } = options;
    this.options = { scale: 1, tensor: 'weight', ...rest };
    this.precision = precisionOf(precision, 'embedding');
    this.outputRowBytes = floatBytes(this.precision.rows) * options.hidden;
    try {
      this.#table = this.memory.upload(readFloats(weights, this.options.tensor, [options.vocab, options.hidden], this.precision.rows));
    } catch (error) {
      this.memory.free();
      throw error;
    }
  }

  protected run(step: LayerStep<LayerState>): void {
    const { vocab, hidden, scale } = this.options;
    step.gpu.launch(embedKernel, rowLaunch(step.rows, hidden, step.stream), {
      tokens: step.tables.tokens, table: this.#table, out: step.output, rows: step.rows, hidden, vocab, scale, dtype: FLOAT_DTYPE_CODE[this.precision.rows],
    });
  }
}
