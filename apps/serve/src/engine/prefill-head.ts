import { offsetPtr, type LayerState, type LayerStep, type Stream, type TransformerLayer } from '@metrale/core';
import { LmHeadLayer, VocabParallelHead } from '@metrale/layer-std';

/**
 * The lm head of a served model, computing in a prefill step only the last row of each sequence
 * (the one the server samples from); decode and verify steps go to the head unchanged. A prompt
 * of n tokens then costs one row of the [vocab × hidden] product instead of n — most of a small
 * model's prefill. The other prefill rows of the output are left as they were: nobody reads them,
 * except for a sequence that `everyRow` names (it asked for its prompt's logprobs), whose rows
 * are all computed.
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
  readonly #everyRow: (slot: number) => boolean;

  private constructor(inner: TransformerLayer<LayerState>, everyRow: (slot: number) => boolean) {
    this.inner = inner;
    this.#everyRow = everyRow;
    this.type = inner.type;
    this.inputRowBytes = inner.inputRowBytes;
    this.outputRowBytes = inner.outputRowBytes;
  }

  /** `layers` with its last layer wrapped when it is a std lm head; unchanged otherwise. */
  static wrapLast(layers: readonly TransformerLayer<any>[], everyRow: (slot: number) => boolean = () => false): TransformerLayer<any>[] {
    const out = [...layers];
    const last = out[out.length - 1];
    if (last instanceof LmHeadLayer || last instanceof VocabParallelHead) out[out.length - 1] = new PrefillLastRowsHead(last, everyRow);
    return out;
  }

  openState(slot: number): LayerState {
    return this.inner.openState(slot);
  }

  closeState(state: LayerState): void {
    this.inner.closeState(state);
  }

  /** The head keeps nothing of earlier rows (an LmHeadLayer): a sequence may start at a cached prefix. */
  resumeAt(state: LayerState, length: number, snapshot: number | undefined, stream: Stream): void {
    this.inner.resumeAt?.(state, length, snapshot, stream);
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
      const state = step.host.states[p];
      const first = state && this.#everyRow(state.slot) ? starts[p]! : end - 1;
      this.inner.forward({
        ...step,
        batch: 1,
        rows: end - first,
        input: offsetPtr(step.input, first * this.inputRowBytes),
        output: offsetPtr(step.output, first * this.outputRowBytes),
      });
    }
  }

  dispose(): void {
    this.inner.dispose();
  }
}
