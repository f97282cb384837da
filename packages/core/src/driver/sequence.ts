import type { LayerState } from '../contract/layer-state.js';

/** A sequence the driver runs: its slot, committed length and per-layer states. */
export interface Sequence {
  readonly id: number;
  readonly slot: number;
  /** Committed rows (the position of its next row). */
  readonly length: number;
  /** True between a verify and its `accept`. */
  readonly awaitingAccept: boolean;
}

/** The driver's own record of a sequence. */
export class SequenceRecord implements Sequence {
  length = 0;
  awaitingAccept = false;
  open = true;
  constructor(
    readonly id: number,
    readonly slot: number,
    readonly states: LayerState[],
  ) {}
}
