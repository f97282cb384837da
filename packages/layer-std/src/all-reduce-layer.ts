import { floatBytes, type Communicator, type FloatDtype, type GpuBackend, type LayerLimits, type LayerState, type LayerStep } from '@metrale/core';
import { StatelessLayer } from './stateless-layer.js';

/**
 * Sums its rows over the ranks of a tensor-parallel group: after a row-parallel projection
 * (o_proj, out_proj, down_proj) each rank holds a partial sum of the full output row, and this
 * makes every rank's rows the whole. One collective per step, on the step's stream, so it is
 * captured into the step's graph with the kernels around it.
 */
export class AllReduceLayer extends StatelessLayer {
  readonly type = 'all-reduce';
  readonly inputRowBytes: number;
  readonly outputRowBytes: number;
  /** The group, and the width and type of a row. */
  readonly #row: { readonly comm: Communicator; readonly width: number; readonly dtype: FloatDtype };

  constructor(gpu: GpuBackend, limits: LayerLimits, comm: Communicator, width: number, dtype: FloatDtype) {
    super(gpu, limits);
    this.#row = { comm, width, dtype };
    this.inputRowBytes = this.outputRowBytes = width * floatBytes(dtype);
  }

  protected run(step: LayerStep<LayerState>): void {
    const { comm, width, dtype } = this.#row;
    comm.allReduce({ send: step.input, recv: step.output, count: step.rows * width, dtype, stream: step.stream });
  }
}
