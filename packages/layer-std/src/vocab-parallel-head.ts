import {
  offsetPtr, type Communicator, type DevicePtr, type GpuBackend, type LayerLimits, type LayerState, type LayerStep, type Precision, type WeightSource,
} from '@metrale/core';
import { LmHeadLayer } from './lm-head-layer.js';
import { StatelessLayer } from './stateless-layer.js';

export interface VocabParallelHeadOptions {
  readonly hidden: number;
  /** The whole vocabulary; each of the group's ranks holds `vocab / size` rows of the weight. */
  readonly vocab: number;
  readonly precision?: Precision;
}

/**
 * The lm head split by vocabulary over a tensor-parallel group: rank r holds rows
 * [r·V/n, (r+1)·V/n) of the weight (its `weights` view gives that part as `weight`) and computes
 * those logits; an all-gather brings every rank's part, and the parts are laid side by side into
 * whole f32 [vocab] rows. Every logit is computed whole on one rank, so the logits are the
 * single-device head's.
 */
export class VocabParallelHead extends StatelessLayer {
  readonly type = 'lm-head (vocab-parallel)';
  readonly inputRowBytes: number;
  readonly outputRowBytes: number;
  readonly #part: LmHeadLayer;
  readonly #comm: Communicator;
  readonly #cols: number;
  readonly #partRows: DevicePtr;
  readonly #gathered: DevicePtr;

  constructor(gpu: GpuBackend, weights: WeightSource, limits: LayerLimits, comm: Communicator, options: VocabParallelHeadOptions) {
    super(gpu, limits);
    this.#comm = comm;
    this.#cols = options.vocab / comm.size;
    this.#part = new LmHeadLayer(gpu, weights, limits, { hidden: options.hidden, vocab: this.#cols, ...(options.precision ? { precision: options.precision } : {}) });
    this.inputRowBytes = this.#part.inputRowBytes;
    this.outputRowBytes = 4 * options.vocab;
    try {
      this.#partRows = this.memory.alloc(limits.maxRows * this.#part.outputRowBytes);
      this.#gathered = this.memory.alloc(comm.size * limits.maxRows * this.#part.outputRowBytes);
    } catch (error) {
      this.#part.dispose();
      this.memory.free();
      throw error;
    }
  }

  protected run(step: LayerStep<LayerState>): void {
    const { rows, stream, gpu } = step;
    this.#part.forward({ ...step, output: this.#partRows });
    const partBytes = this.#part.outputRowBytes;
    this.#comm.allGather({ send: this.#partRows, recv: this.#gathered, count: rows * this.#cols, dtype: 'f32', stream });
    // gathered is [rank][row][cols]; a logits row is [rank 0's cols | rank 1's | …].
    for (let row = 0; row < rows; row++) {
      for (let r = 0; r < this.#comm.size; r++) {
        gpu.copyDeviceAsync(offsetPtr(step.output, row * this.outputRowBytes + r * partBytes), offsetPtr(this.#gathered, (r * rows + row) * partBytes), partBytes, stream);
      }
    }
  }

  override dispose(): void {
    this.#part.dispose();
    super.dispose();
  }
}
