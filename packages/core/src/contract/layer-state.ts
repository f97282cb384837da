/**
 * The per-sequence, per-layer state a layer keeps: host bookkeeping (cache lengths, prestaged slot
 * indices) and the addresses of its device state. The layer creates it; the driver hands it back
 * on every hook and step. `slot` is the sequence's slot, stable for the sequence's lifetime.
 */
export interface LayerState {
  readonly slot: number;
}
