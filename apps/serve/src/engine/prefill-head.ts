import { offsetPtr, type LayerState, type LayerStep, type TransformerLayer } from '@metrale/core';
import { LmHeadLayer, VocabParallelHead } from '@metrale/layer-std';

/**
 * The lm head of a served model, computing in a prefill step only the last row of each sequence
 * (the one the server samples from); decode and verify steps go to the head unchanged. A prompt
 * of n tokens then costs one row of the [vocab × hidden] product instead of n — most of a small
 * model's prefill. The other prefill rows of the output are left as they were: nobody reads them.
 *
 * Only an `LmHeadLayer` (or a tensor-parallel rank's `VocabParallelHead`, whose ranks all wrap
 * theirs alike) is wrapped: its rows are independent and it reads nothing but the step's rows,
 * input and output, so a one-row step at an offset is exact. Prefill runs eagerly
 * (never captured), so the host row table may steer it.
 */
export class PrefillLastRowsHead implements TransformerLayer<LayerState> {
  readonly type: string;
  readonly inputRowBytes: number;
  readonly outputRowBytes: number;
  readonly inner: TransformerLayer<LayerState>;

  private constructor(inner: TransformerLayer<LayerState>) {
    this.inner = inner;
    this.type = inner.type;
    this.inputRowBytes = inner.inputRowBytes;
    this.outputRowBytes = inner.outputRowBytes;
  }

  /** `layers` with its last layer wrapped when it is a std lm head; unchanged otherwise. */
  static wrapLast(layers: readonly TransformerLayer<any>[]): TransformerLayer<any>[] {
    const out = [...layers];
    const last = out[out.length - 1];
    if (last instanceof LmHeadLayer || last instanceof VocabParallelHead) out[out.length - 1] = new PrefillLastRowsHead(last);
    return out;
  }

  openState(slot: number): LayerState {
    return this.inner.openState(slot);
  }

  closeState(state: LayerState): void {
    this.inner.closeState(state);
  }

  forward(step: LayerStep<LayerState>): void {
    if (step.phase !== 'prefill') {
      this.inner.forward(step);
      return;
    }
    const starts = step.host.rowStarts;
    for (let p = 0; p < step.batch; p++) {
      const end = starts[p + 1]!;
      if (end <= starts[p]!) continue;
      const row = end - 1;
      this.inner.forward({
        ...step,
        batch: 1,
        rows: 1,
        input: offsetPtr(step.input, row * this.inputRowBytes),
        output: offsetPtr(step.output, row * this.outputRowBytes),
      });
    }
  }

  dispose(): void {
    this.inner.dispose();
  }
}
