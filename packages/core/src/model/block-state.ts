import type { LayerState } from '../contract/layer-state.js';

/** A decoder block's state of one sequence: the state of each of its sub-layers, in order. */
export interface BlockState extends LayerState {
  readonly slot: number;
  readonly parts: readonly LayerState[];
}
